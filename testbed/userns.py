"""The testbed without root: a user, network and mount namespace of its own, where the kernel allows.

Unprivileged, a process may create a user namespace in which it is root (uid 0
mapped to its own uid), and in it network namespaces, veths and AF_PACKET
sockets, all owned by that user namespace. :func:`enter` makes this process such
a root: ``unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS)``, the uid and gid
maps, mounts made private, and a tmpfs on ``/run`` (where the namespaces are
mounted, ``/run/netns``, and the testbed keeps its state, ``/run/dlcp``), so that
nothing it does is seen outside. The kernel accepts ``unshare(CLONE_NEWUSER)``
only from a single-threaded process: the CLI therefore re-executes itself
(:func:`reexec`) and the new interpreter enters the namespaces before importing
anything that starts threads (numpy, grpc).

Everything made in there ends with the command: a fabric cannot outlive it, so
only verbs that build, use and remove a fabric in one command (``run``,
``bench``, ``dlcp demo --testbed``) run this way.

:func:`why_not` asks a fresh interpreter to do the same and says why it failed,
if it did (``python -m dlcp.testbed.userns`` prints that reason).
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from dlcp.entry import module_argv

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
ENV = "DLCP_TESTBED_USERNS"
"""Set (to ``1``) by :func:`reexec`: the new interpreter enters the namespaces first thing."""
PROBE_TIMEOUT_S = 30.0


class Unavailable(PermissionError):
    """This process is not root and cannot become root of a user namespace here (the message says why)."""


def requested() -> bool:
    """Whether this process was re-executed to run in a user namespace and is not in it yet."""
    return os.environ.get(ENV) == "1" and os.geteuid() != 0


def _why(err: int) -> str:
    if err == errno.EPERM:
        return (
            "the kernel refuses unprivileged user namespaces (EPERM: a sysctl such as "
            "kernel.unprivileged_userns_clone=0 or kernel.apparmor_restrict_unprivileged_userns=1, or a "
            "container's seccomp profile)"
        )
    if err == errno.ENOSPC:
        return (
            "no more user namespaces may be created (ENOSPC: the limit user.max_user_namespaces, of this "
            "namespace or an enclosing one, is reached)"
        )
    if err == errno.EINVAL:
        return "the kernel has no user or network namespaces (EINVAL from unshare)"
    if err == errno.ENOSYS:
        return "this kernel has no unshare system call"
    return f"unshare failed: {os.strerror(err)}"


def enter() -> None:
    """Become root of a new user namespace with its own network and mount namespaces; raises :class:`Unavailable`.

    Must run while the process has one thread.
    """
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS) != 0:
        raise Unavailable(_why(ctypes.get_errno()))
    try:
        Path("/proc/self/setgroups").write_text("deny")  # required before an unprivileged gid_map
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    except OSError as exc:
        raise Unavailable(f"the user namespace's id maps could not be written: {exc}") from None
    for target, fstype, flags, data in ((b"/", None, MS_REC | MS_PRIVATE, None), (b"/run", b"tmpfs", 0, b"mode=0755")):
        source = b"dlcp" if fstype else None
        if libc.mount(source, target, fstype, flags, data) != 0:
            err = ctypes.get_errno()
            raise Unavailable(f"mount {target.decode()} in the new mount namespace failed: {os.strerror(err)}")
    from pyroute2 import IPRoute  # loopback up: the switches' P4Runtime servers listen on their namespace's

    with IPRoute() as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")


def why_not() -> str | None:
    """Why a user namespace cannot be entered here (a fresh interpreter tries), or None when it can."""
    try:
        proc = subprocess.run(
            module_argv(__name__),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={k: v for k, v in os.environ.items() if k != ENV},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the probe for user namespaces failed: {exc}"
    if proc.returncode == 0:
        return None
    err = proc.stderr.strip().splitlines()
    return proc.stdout.strip() or (err[-1] if err else f"the probe exited with {proc.returncode}")


def reexec(argv: Sequence[str]) -> None:
    """Replace this process by ``argv`` (this interpreter's command line, the CLI's own) in a user namespace of
    its own (does not return)."""
    if os.environ.get(ENV) == "1":  # never a loop of re-executions
        raise Unavailable("re-executed in a user namespace already, and still not root there")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], list(argv), {**os.environ, ENV: "1"})  # noqa: S606 (this interpreter, no shell)


def main() -> int:
    """The probe: 0 when :func:`enter` works here, else 1 with the reason on stdout."""
    try:
        enter()
    except Unavailable as exc:
        sys.stdout.write(f"{exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
