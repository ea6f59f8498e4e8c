"""Compile DLCP's ns-3 components against the ns3 wheel and load them through cppyy.

The C++ sources in ``simulations/cpp/`` (and the constants header rendered from
the core, :func:`dlcp.p4.gen_constants.render_c_header`) are compiled on first use into one
shared library, cached under ``$XDG_CACHE_HOME/dlcp/sim`` (``~/.cache/dlcp/sim``;
``DLCP_SIM_CACHE`` overrides) by a hash of the sources, the compiler and the flags.
The wheel's CMake and pkg-config files name its build machine's paths, so the
flags are passed directly (``-I<wheel>/include -L<wheel>/lib64 -Wl,-rpath,...``).

Only ``api.h`` is shown to cppyy: it includes no ns-3 header, so loading costs a
fraction of ``from ns import ns`` (which parses every module's headers); the
ns-3 libraries come in as the compiled library's own dependencies.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlcp.p4 import gen_constants

log = logging.getLogger(__name__)

SOURCES_DIR = Path(__file__).resolve().parent / "cpp"
UNITS = (
    "switch_config.cc",
    "queue_disc.cc",
    "port.cc",
    "routing.cc",
    "transport.cc",
    "tcp_channels.cc",
    "lean_tcp.cc",
    "jobs.cc",
    "host_ports.cc",
    "messages.cc",
    "build.cc",
    "simulation.cc",
    "statistics.cc",
    "harness.cc",
)
NS3_MODULES = ("core", "network", "internet", "point-to-point", "traffic-control", "applications", "stats", "bridge")
NS3_VERSION = "3.44"
LIBRARY = "libdlcpsim.so"


class EngineError(RuntimeError):
    """The simulator cannot be built or loaded (ns3 missing, no compiler, a compile error)."""


@dataclass(frozen=True)
class Wheel:
    prefix: Path

    @property
    def include(self) -> Path:
        return self.prefix / "include"

    @property
    def lib(self) -> Path:
        return self.prefix / "lib64"


def find_wheel() -> Wheel:
    """The installed ns3 wheel (``pip install 'dlcp[sim]'``)."""
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError("ns-3 is not installed: pip install 'dlcp[sim]' (the ns3==3.44.post0 wheel)")
    prefix = Path(next(iter(spec.submodule_search_locations)))
    wheel = Wheel(prefix)
    if not (wheel.include / "ns3" / "core-module.h").exists():
        raise EngineError(f"the ns3 package at {prefix} has no C++ headers (include/ns3)")
    return wheel


def cache_root() -> Path:
    env = os.environ.get("DLCP_SIM_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlcp" / "sim"


def compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise EngineError("no C++ compiler (g++) found: the simulator's components are compiled on first use")
    return cxx


def flags(wheel: Wheel, include_dir: Path) -> list[str]:
    # The wheel's own build profile and feature macros (from its CMake export), so that
    # inline code in the headers compiles as it did in the libraries.
    defines = ["-DNS3_BUILD_PROFILE_RELEASE", "-DNS3_LOG_ENABLE", "-DNS3_ASSERT_ENABLE", "-D__LINUX__"]
    libs = [f"-lns{NS3_VERSION}-{m}" for m in NS3_MODULES]
    return [
        "-std=c++20",
        "-O2",
        "-fPIC",
        "-shared",
        *defines,
        f"-I{include_dir}",
        f"-I{SOURCES_DIR}",
        f"-I{wheel.include}",
        f"-L{wheel.lib}",
        f"-Wl,-rpath,{wheel.lib}",
        *libs,
    ]


def _digest(cxx: str, flag_list: list[str], header: str) -> str:
    h = hashlib.sha256()
    h.update(cxx.encode())
    h.update(subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout.encode())
    h.update("\0".join(flag_list).encode())
    h.update(header.encode())
    for f in sorted(SOURCES_DIR.iterdir()):
        if f.suffix in (".h", ".cc"):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def build(force: bool = False) -> Path:
    """Compile the components if no cached library matches; returns the library's path."""
    wheel = find_wheel()
    cxx = compiler()
    header = gen_constants.render_c_header()
    probe_flags = flags(wheel, Path("<gen>"))
    key = _digest(cxx, probe_flags, header)
    out_dir = cache_root() / key
    lib = out_dir / LIBRARY
    if lib.exists() and not force:
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compile at a time; others wait and reuse it
        if lib.exists() and not force:
            return lib
        gen = out_dir / "include"
        gen.mkdir(exist_ok=True)
        (gen / gen_constants.C_HEADER).write_text(header)
        flag_list = flags(wheel, gen)
        start = time.monotonic()
        log.info("compiling the simulator's components into %s (once per source change)", out_dir)
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            objs = []
            procs = []
            compile_flags = [f for f in flag_list if not f.startswith(("-l", "-L", "-Wl", "-shared"))]
            for unit in UNITS:
                obj = Path(tmp) / (unit + ".o")
                objs.append(str(obj))
                cmd = [cxx, *compile_flags, "-c", str(SOURCES_DIR / unit), "-o", str(obj)]
                procs.append((unit, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
                if len(procs) >= 2:  # two compilers at a time: the machines this runs on are small
                    _wait(procs.pop(0))
            while procs:
                _wait(procs.pop(0))
            tmp_lib = Path(tmp) / LIBRARY
            link = [cxx, *objs, "-o", str(tmp_lib), *[f for f in flag_list if f.startswith(("-l", "-L", "-Wl"))]]
            link.insert(1, "-shared")
            res = subprocess.run(link, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise EngineError(f"linking the simulator failed:\n{res.stdout}{res.stderr}")
            os.replace(tmp_lib, lib)
        log.info("compiled in %.0f s", time.monotonic() - start)
    return lib


def _wait(item: tuple[str, subprocess.Popen[bytes]]) -> None:
    unit, proc = item
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise EngineError(f"compiling {unit} failed:\n{out.decode(errors='replace')[-8000:]}")


@functools.cache
def load() -> Any:
    """Build if needed and load the library into this process; returns cppyy's ``dlcpsim`` namespace."""
    lib = build()
    import cppyy  # the ns3 wheel's dependency; imported here so nothing loads at import time

    cppyy.add_include_path(str(lib.parent / "include"))
    cppyy.add_include_path(str(SOURCES_DIR))
    cppyy.include(str(SOURCES_DIR / "api.h"))
    cppyy.load_library(str(lib))
    return cppyy.gbl.dlcpsim
