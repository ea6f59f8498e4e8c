/*
 * dlcp.host._fastpath, drop classes: drop classification (dlcp.policy.Policy.drop_classes for the mean_abs and max_abs statistics of float32
 * and float64 tensors), bit for bit as numpy computes it, in one pass over the sampled elements and without
 * the GIL. The numpy version in dlcp/policy.py is the reference; tests/test_drop_classes_c.py checks the two
 * against each other. What "bit for bit" takes:
 *   - a packet's mean is numpy's float64 add-reduce of the sampled |x| (pairwise_sum: 8 running sums for
 *     8..128 elements, recursive halves above, a plain loop below 8), started from 0, divided by the count;
 *     numpy sums a row of float32 in one piece only up to its 8192-element cast buffer, so samples over 4096 are
 *     refused (the caller then uses numpy);
 *   - the max propagates NaN, as numpy's does;
 *   - the thresholds are np.quantile(stat, cuts) with method "linear": order statistics at floor((n-1)q)
 *     and the next, interpolated by numpy's _lerp (two formulas, split at gamma 0.5), all of them NaN when
 *     any statistic is NaN;
 *   - the class is len(cuts) minus np.searchsorted(thresholds, stat, side="right"), with NaN ordered last.
 * Built with -ffp-contract=off: a fused multiply-add would round differently from numpy's separate ones.
 */
#include "_fastpath.h"

#include <math.h>

#define DC_PREFETCH 8 /* packets ahead */

static double dc_pairwise(const double *a, Py_ssize_t n) {
    if (n < 8) {
        double res = -0.0;
        for (Py_ssize_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        Py_ssize_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return dc_pairwise(a, n2) + dc_pairwise(a + n2, n - n2);
}

static inline double dc_load(const uint8_t *base, int is64, Py_ssize_t i) {
    if (is64) {
        double v;
        memcpy(&v, base + (size_t)i * 8, 8);
        return fabs(v);
    }
    float v;
    memcpy(&v, base + (size_t)i * 4, 4);
    return fabs((double)v);
}

/* One packet's statistic over the elements base[start + off[j]]. */
static double dc_stat(const uint8_t *base, int is64, Py_ssize_t start, const int64_t *off, Py_ssize_t m, int max_abs,
                      double *tmp) {
    if (max_abs) {
        double mx = dc_load(base, is64, start + off[0]);
        for (Py_ssize_t j = 1; j < m; j++) {
            double v = dc_load(base, is64, start + off[j]);
            if (v > mx || v != v) mx = v;
            if (mx != mx) break;
        }
        return mx;
    }
    for (Py_ssize_t j = 0; j < m; j++) tmp[j] = dc_load(base, is64, start + off[j]);
    return (0.0 + dc_pairwise(tmp, m)) / (double)m;
}

/* Ask for a packet's sampled cache lines ahead of time: packets lie a payload apart, too far for the
 * hardware prefetcher, and the classification is otherwise a chain of cache misses. */
static inline void dc_prefetch(const uint8_t *base, Py_ssize_t esize, Py_ssize_t start, const int64_t *off,
                               Py_ssize_t m) {
    uintptr_t last = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        const uint8_t *a = base + (size_t)(start + off[j]) * (size_t)esize;
        if (((uintptr_t)a >> 6) != last) {
            __builtin_prefetch(a);
            last = (uintptr_t)a >> 6;
        }
    }
}

/* The k-th smallest of a[0..n) (no NaN), partially reordering a. */
static double dc_select(double *a, Py_ssize_t n, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = n - 1;
    int rounds = 0;
    while (hi > lo) {
        if (++rounds > 64) { /* a pathological input: finish the range with insertion sort */
            for (Py_ssize_t x = lo + 1; x <= hi; x++) {
                double v = a[x];
                Py_ssize_t y = x;
                for (; y > lo && a[y - 1] > v; y--) a[y] = a[y - 1];
                a[y] = v;
            }
            break;
        }
        Py_ssize_t mid = lo + (hi - lo) / 2;
        double t;
#define DC_SWAP(p, q) (t = a[p], a[p] = a[q], a[q] = t)
        if (a[mid] < a[lo]) DC_SWAP(lo, mid);
        if (a[hi] < a[lo]) DC_SWAP(lo, hi);
        if (a[hi] < a[mid]) DC_SWAP(mid, hi);
        double pivot = a[mid];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                DC_SWAP(i, j);
                i++;
                j--;
            }
        }
#undef DC_SWAP
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return a[k];
    }
    return a[k];
}

/*
 * drop_classes(values, is64, epp, max_abs, offsets, tail_offsets, cuts, out) -> None
 *
 * `values`: the message's elements (float32, or float64 when `is64`); packets of `epp` elements, the last
 * one possibly short. `offsets` (int64): the sampled elements of a full packet; `tail_offsets`: those of
 * the short last packet (empty when there is none). `cuts` (float64, 1..3, increasing, in (0, 1)): the
 * kind's drop quantiles. `out` (uint8, one per packet): the drop classes.
 */
PyObject *drop_classes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer vals, offs, toffs, cuts_buf, out;
    int is64, max_abs;
    Py_ssize_t epp;
    if (!PyArg_ParseTuple(args, "y*pnpy*y*y*w*", &vals, &is64, &epp, &max_abs, &offs, &toffs, &cuts_buf, &out))
        return NULL;
    PyObject *result = NULL;
    double *stat = NULL, *sorted = NULL, *tmp = NULL;
    const Py_ssize_t esize = is64 ? 8 : 4;
    const Py_ssize_t n = vals.len / esize;
    const int64_t *off = (const int64_t *)offs.buf, *toff = (const int64_t *)toffs.buf;
    const Py_ssize_t m = offs.len / 8, tm = toffs.len / 8, ncuts = cuts_buf.len / 8;
    const double *cuts = (const double *)cuts_buf.buf;
    if (epp <= 0 || vals.len % esize || n == 0) {
        PyErr_SetString(PyExc_ValueError, "drop_classes: values must be a non-empty float32/float64 buffer");
        goto done;
    }
    const Py_ssize_t full = n / epp, rest = n - full * epp, npk = full + (rest > 0);
    if (out.len != npk || ncuts < 1 || ncuts > 3 || (full && (m < 1 || m > DC_MAX_SAMPLE)) ||
        (rest && (tm < 1 || tm > DC_MAX_SAMPLE))) {
        PyErr_SetString(PyExc_ValueError, "drop_classes: inconsistent output, sample or cuts");
        goto done;
    }
    for (Py_ssize_t j = 0; j < m; j++)
        if (off[j] < 0 || off[j] >= epp) {
            PyErr_SetString(PyExc_ValueError, "drop_classes: a sample offset lies outside the packet");
            goto done;
        }
    for (Py_ssize_t j = 0; j < tm; j++)
        if (toff[j] < 0 || toff[j] >= rest) {
            PyErr_SetString(PyExc_ValueError, "drop_classes: a tail sample offset lies outside the last packet");
            goto done;
        }
    for (Py_ssize_t c = 0; c < ncuts; c++)
        if (!(cuts[c] > 0.0 && cuts[c] < 1.0) || (c && cuts[c] <= cuts[c - 1])) {
            PyErr_SetString(PyExc_ValueError, "drop_classes: cuts must increase within (0, 1)");
            goto done;
        }
    stat = PyMem_RawMalloc(sizeof(double) * (size_t)npk);
    sorted = PyMem_RawMalloc(sizeof(double) * (size_t)npk);
    tmp = PyMem_RawMalloc(sizeof(double) * (size_t)(m > tm ? m : tm));
    if (!stat || !sorted || !tmp) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *base = (const uint8_t *)vals.buf;
    uint8_t *cls = (uint8_t *)out.buf;
    int has_nan = 0;
    for (Py_ssize_t p = 0; p < full; p++) {
        if (p + DC_PREFETCH < full) dc_prefetch(base, esize, (p + DC_PREFETCH) * epp, off, m);
        double s = dc_stat(base, is64, p * epp, off, m, max_abs, tmp);
        has_nan |= s != s;
        stat[p] = sorted[p] = s;
    }
    if (rest) {
        double s = dc_stat(base, is64, full * epp, toff, tm, max_abs, tmp);
        has_nan |= s != s;
        stat[full] = sorted[full] = s;
    }
    double thr[3];
    for (Py_ssize_t c = 0; c < ncuts; c++) {
        if (has_nan) { /* numpy: every quantile of a sample holding NaN is NaN */
            thr[c] = NAN;
            continue;
        }
        double vi = (double)(npk - 1) * cuts[c], prev_i, a, b;
        if (vi >= (double)(npk - 1)) { /* numpy takes the last element for both, at index -1 */
            prev_i = -1.0;
            a = b = dc_select(sorted, npk, npk - 1);
        } else {
            prev_i = floor(vi);
            a = dc_select(sorted, npk, (Py_ssize_t)prev_i);
            b = dc_select(sorted, npk, (Py_ssize_t)prev_i + 1);
        }
        double gamma = vi - prev_i, diff = b - a;
        thr[c] = gamma >= 0.5 ? b - diff * (1.0 - gamma) : a + diff * gamma;
    }
    for (Py_ssize_t p = 0; p < npk; p++) {
        double s = stat[p];
        int below = 0; /* thresholds at or below s, NaN ordered after every number */
        for (Py_ssize_t c = 0; c < ncuts; c++) below += s != s ? 1 : (thr[c] <= s);
        cls[p] = (uint8_t)(ncuts - below);
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_RawFree(stat);
    PyMem_RawFree(sorted);
    PyMem_RawFree(tmp);
    PyBuffer_Release(&vals);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&toffs);
    PyBuffer_Release(&cuts_buf);
    PyBuffer_Release(&out);
    return result;
}
