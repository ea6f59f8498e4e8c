"""Drop classification in C (``FastClassifier``) against the policy's numpy reference.

The C pass must give the same class to every packet as :meth:`Policy.drop_classes` for the same tensor:
the same sampled elements, numpy's summation order, ``np.quantile``'s interpolation and
``np.searchsorted``'s NaN order. Whatever C does not take (``rms``, other dtypes, large samples) must go
to the reference.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dlcp.host import fastpath
from dlcp.message import MessageKey, MessageSpec
from dlcp.policy import KindPolicy, Policy
from dlcp.protocol import DType, MessageKind

pytestmark = pytest.mark.fastpath  # skipped without the C module, failed under make test (conftest.py)

RS = MessageKind.REDUCE_SCATTER


def _policy(statistic: str, sample_elems: int, cuts: tuple[float, ...]) -> Policy:
    kinds = dict(Policy().kinds)
    kinds[RS] = KindPolicy(loss_bound=0.5, drop_quantiles=cuts)
    return Policy(statistic=statistic, sample_elems=sample_elems, kinds=kinds)  # type: ignore[arg-type]


def _check(values: np.ndarray, epp: int, policy: Policy) -> fastpath.FastClassifier:
    fc = fastpath.FastClassifier(policy)
    with np.errstate(all="ignore"):  # numpy warns of inf - inf in its interpolation; that NaN is the reference
        got = fc.drop_classes(values, epp, RS)
        want = policy.drop_classes(values, epp, RS)
    assert got.dtype == want.dtype == np.uint8
    np.testing.assert_array_equal(got, want)
    return fc


_cuts = st.lists(st.floats(0.01, 0.99), min_size=1, max_size=3, unique=True).map(lambda c: tuple(sorted(c)))
_cuts = _cuts.filter(lambda c: all(b > a for a, b in itertools.pairwise(c)))


@st.composite
def _tensors(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    epp = draw(st.integers(1, 300))
    n = draw(st.integers(1, 40 * epp if epp < 50 else 6 * epp))
    special = draw(st.booleans())
    if special:  # anything a float holds: NaN, inf, subnormals, zeros of both signs, huge and tiny mixed
        width = 32 if dtype == np.float32 else 64
        elems = st.floats(allow_nan=True, allow_infinity=True, width=width)
        values = draw(hnp.arrays(dtype, n, elements=elems))
    else:  # gradients: a random scale per element, so sums round
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        values = (rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n))).astype(dtype)
        if draw(st.booleans()):  # many equal statistics: ties at the cuts
            values = np.round(values, 0).astype(dtype)
    return values, epp


@pytest.mark.skipif(not fastpath.available(), reason="the C data path is not built")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tensor=_tensors(),
    statistic=st.sampled_from(["mean_abs", "max_abs"]),
    sample=st.sampled_from([0, 1, 3, 16, 32, 48, 100, 1000]),
    cuts=_cuts,
)
def test_c_classes_equal_numpy(tensor: tuple[np.ndarray, int], statistic: str, sample: int, cuts: tuple) -> None:
    values, epp = tensor
    fc = _check(values, epp, _policy(statistic, sample, cuts))
    assert fc.fallbacks == 0  # C took it


@pytest.mark.skipif(not fastpath.available(), reason="the C data path is not built")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("statistic", ["mean_abs", "max_abs"])
def test_c_classes_equal_numpy_at_wire_sizes(dtype: type, statistic: str) -> None:
    """The sizes the ring sends (8 KB payloads, a short tail), the default sample and all elements (4096)."""
    rng = np.random.default_rng(7)
    for epp, n, sample in [(2048, 2048 * 500 + 77, 32), (1024, 1024 * 300, 32), (4096, 4096 * 9 + 5, 0)]:
        values = (rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))).astype(dtype)
        values[rng.integers(0, n, 5)] = 0
        fc = _check(values, epp, _policy(statistic, sample, (0.25, 0.5, 0.75)))
        assert fc.fallbacks == 0


@pytest.mark.skipif(not fastpath.available(), reason="the C data path is not built")
@pytest.mark.parametrize(
    "values",
    [
        np.array([1.0], dtype=np.float32),  # one packet: the quantile's index clips to the last element
        np.array([np.inf], dtype=np.float32),  # ... and interpolating inf with itself gives NaN, as in numpy
        np.array([np.nan, 1.0, 2.0, 3.0, 4.0], dtype=np.float64),
        np.array([1.0, 2.0, 3.0, np.nan, 5.0, 6.0, 7.0], dtype=np.float32),  # NaN inside a packet, not first
        np.array([0.0, np.inf, 1.0, np.inf, 2.0, 3.0], dtype=np.float32),
        np.zeros(50, dtype=np.float32),
        np.full(50, -0.0, dtype=np.float64),
    ],
)
def test_c_classes_edge_cases(values: np.ndarray) -> None:
    for statistic in ("mean_abs", "max_abs"):
        for epp in (1, 2, 3):
            _check(values, epp, _policy(statistic, 32, (0.3, 0.5, 0.9)))


@pytest.mark.skipif(not fastpath.available(), reason="the C data path is not built")
def test_what_c_does_not_take_goes_to_numpy() -> None:
    rng = np.random.default_rng(3)
    x32 = rng.standard_normal(5000).astype(np.float32)
    over = fastpath._require().MAX_SAMPLE + 1  # the largest sample C takes, from the C module itself
    assert over < x32.size
    cases = [
        (_policy("rms", 32, (0.5,)), x32, 100),
        (_policy("mean_abs", 32, (0.5,)), x32.astype(np.float16), 100),
        (_policy("mean_abs", 32, (0.5,)), (x32 * 1000).astype(np.int32), 100),
        (_policy("mean_abs", 0, (0.5,)), x32, over),  # a sample of MAX_SAMPLE + 1 elements
        (_policy("mean_abs", 32, (0.5,)), x32[::2], 100),  # not contiguous
    ]
    for policy, values, epp in cases:
        fc = _check(values, epp, policy)
        assert fc.fallbacks == 1


@pytest.mark.skipif(not fastpath.available(), reason="the C data path is not built")
def test_message_drop_classes_as_the_policy() -> None:
    policy = Policy()
    fc = fastpath.FastClassifier(policy)
    x = np.random.default_rng(1).standard_normal(10_000).astype(np.float32)
    for kind, bound in [(RS, 0.01), (MessageKind.ALL_GATHER, 0.0), (RS, 0.0), (MessageKind.PUSH, 0.3)]:
        spec = MessageSpec(MessageKey(1, 0, 0, 1), kind, x.size, 100, DType.FLOAT32, 0, bound)
        got, want = fc.message_drop_classes(spec, x), policy.message_drop_classes(spec, x)
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_array_equal(got, want)
            assert want.any()
    empty = MessageSpec(MessageKey(1, 0, 0, 1), RS, 0, 100, DType.FLOAT32, 0, 0.5)
    assert fc.message_drop_classes(empty, x[:0]) is None


@pytest.mark.skipif(not fastpath.available(), reason="the C data path is not built")
def test_c_refuses_inconsistent_arguments() -> None:
    c = fastpath._load()
    assert c is not None
    x = np.ones(100, dtype=np.float32)
    off, none, cuts = np.arange(10, dtype=np.int64), np.zeros(0, dtype=np.int64), np.array([0.5])
    out = np.empty(10, dtype=np.uint8)
    c.drop_classes(x, False, 10, False, off, none, cuts, out)  # consistent: no error
    with pytest.raises(ValueError, match="outside the packet"):
        c.drop_classes(x, False, 10, False, off + 1, none, cuts, out)
    with pytest.raises(ValueError, match="inconsistent"):
        c.drop_classes(x, False, 10, False, off, none, cuts, np.empty(9, dtype=np.uint8))
    with pytest.raises(ValueError, match="tail sample"):
        c.drop_classes(x[:95], False, 10, False, off, np.array([5], dtype=np.int64), cuts, out)
    with pytest.raises(ValueError, match="cuts"):
        c.drop_classes(x, False, 10, False, off, none, np.array([0.5, 0.5]), out)
