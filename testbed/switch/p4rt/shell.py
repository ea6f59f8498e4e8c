"""Opening p4runtime-shell (the P4 community's interactive P4Runtime client) against a DLCP switch.

p4runtime-shell pins protobuf<3.21 and IPython 7.31, so it lives in its own
virtual environment, ``.venv-p4rt-shell`` (``make venv-p4rt-shell``), and runs
as a child process. When the switch has no pipeline yet, the shell is given
DLCP's P4Info and a device config (the BMv2 JSON when ``make p4`` built it,
else an empty file: the software switch keeps the blob opaque) and pushes them
with VERIFY_AND_COMMIT; when the switch already runs DLCP's program, the shell
reads the P4Info from the switch and nothing is reset.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
from pathlib import Path

import grpc
from finsy.proto import p4r, p4r_grpc

from dlcp.p4.paths import BMV2_JSON, COMMITTED_P4INFO, ROOT

log = logging.getLogger(__name__)

SHELL_VENV = ROOT / ".venv-p4rt-shell"
SHELL_PYTHON = SHELL_VENV / "bin" / "python"
DEFAULT_ELECTION_ID = (0, 1)
"""(high, low). Low on purpose: with a controller connected the shell is a read-only backup."""


def parse_election_id(text: str) -> tuple[int, int]:
    """``H,L`` (two unsigned 64-bit integers) as p4runtime-shell takes it."""
    parts = text.split(",")
    try:
        high, low = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"election id {text!r}: expected H,L (two integers)") from None
    if not (0 <= high < 1 << 64 and 0 <= low < 1 << 64):
        raise ValueError(f"election id {text!r}: H and L must be in 0..2**64-1")
    return high, low


def pipeline_of(address: str, device_id: int, timeout: float = 5.0) -> p4r.ForwardingPipelineConfig | None:
    """The switch's P4Info and cookie (None when it has no pipeline); OSError when it cannot be reached."""
    with grpc.insecure_channel(address) as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        request = p4r.GetForwardingPipelineConfigRequest(
            device_id=device_id, response_type=p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE
        )
        try:
            reply = stub.GetForwardingPipelineConfig(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                return None  # BMv2's answer when it has no pipeline
            raise OSError(f"P4Runtime server {address}: {code.name}: {exc.details()}") from None  # type: ignore[attr-defined]
    if not reply.HasField("config") or not reply.config.p4info.tables:
        return None
    return reply.config


def shell_argv(
    python: Path,
    address: str,
    device_id: int,
    election_id: tuple[int, int],
    config: tuple[Path, Path] | None,
) -> list[str]:
    argv = [str(python), "-m", "p4runtime_sh", "--grpc-addr", address, "--device-id", str(device_id)]
    argv += ["--election-id", f"{election_id[0]},{election_id[1]}"]
    if config is not None:
        argv += ["--config", f"{config[0]},{config[1]}"]
    return argv


def open_shell(
    address: str,
    device_id: int = 1,
    election_id: tuple[int, int] = DEFAULT_ELECTION_ID,
    *,
    python: Path = SHELL_PYTHON,
    stdin_text: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run p4runtime-shell against ``address`` (interactive unless ``stdin_text`` is given)."""
    if not python.exists():
        raise OSError(f"p4runtime-shell's venv is missing ({python}): run `make venv-p4rt-shell`")
    with tempfile.TemporaryDirectory(prefix="dlcp-shell-") as tmp:
        config = None
        if pipeline_of(address, device_id) is None:
            blob = BMV2_JSON
            if not blob.exists():
                blob = Path(tmp) / "empty-device-config.bin"
                blob.write_bytes(b"")
            config = (COMMITTED_P4INFO, blob)
            log.info("the switch has no pipeline: the shell pushes DLCP's P4Info with %s", blob)
        argv = shell_argv(python, address, device_id, election_id, config)
        capture = stdin_text is not None
        return subprocess.run(
            argv, input=stdin_text, text=True, capture_output=capture, timeout=timeout, check=False, cwd=tmp
        )
