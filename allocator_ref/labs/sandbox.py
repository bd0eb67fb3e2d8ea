"""Where a graded submission runs: as a user who can reach no judge, inside limits, and ended with all it started.

The autograder runs a learner's cells (regrade.py), and nothing they do may reach a judge, the
gradebook or another learner.  Three things make that so:

* **another user.**  Run as root (``sudo make autograde``), each submission runs as the learner's
  own Unix user when the machine has one (a hub room makes one per learner), else as a numeric
  user of its own (``GRADER_UID_BASE`` + the grading slot: no account, no home, no files but its
  scratch folder).  A process of another user cannot open ``/proc/<judge>/fd/*``, read a judge's
  memory or signal it.  ``PR_SET_NO_NEW_PRIVS``: no set-user-ID program (sudo) takes it back up.
  Not run as root, the submission runs as the autograder's own user, and only the two points below
  hold (``describe()`` says so in make autograde's log);
* **limits** (``setrlimit``): CPU seconds, address space, processes, file size, no core files;
  run as root, a network namespace of its own with only the loopback up (``unshare(CLONE_NEWNET)``:
  no network; the loopback stays for a notebook kernel's own sockets);
* **nothing left behind.**  The process that starts a submission is a *subreaper*
  (``PR_SET_CHILD_SUBREAPER``): whatever the submission starts and orphans, even a ``setsid``
  grandchild that left every process group, becomes its child, and ``processes.end_descendants``
  kills them all before anything else runs (allocator_ref/processes.py: predict and check() use it too).

Linux only for the user change, the namespace and the subreaper; elsewhere the limits alone.
"""
from __future__ import annotations

import ctypes
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..processes import prctl as _prctl

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNET = 0x40000000
GRADER_UID_BASE = 61_000          # numeric users for submissions with no account of their own (+ slot)
LOGIN_UID_MIN = 1000              # login.defs' UID_MIN: below it, system accounts
GRADER_PYTHON_ENV = "ALLOCATOR_REF_GRADER_PYTHON"


@dataclass(frozen=True)
class Limits:
    """What one submission process may use (setrlimit; CPU time is per process)."""
    cpu_s: int = 1800
    memory_bytes: int = 8 << 30
    processes: int = 256
    file_bytes: int = 256 << 20


class SandboxError(RuntimeError):
    """The sandbox cannot be set up here; the message says what to do."""


def lock() -> None:
    """No process of this user may open this one's /proc files or read its memory (not dumpable).
    A forked child keeps it (only execve resets it): a judge forked from a locked process is
    locked from its first instruction, before it holds any pipe."""
    _prctl(PR_SET_DUMPABLE, 0)


def runs_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@dataclass
class Sandbox:
    """How one submission process starts: its user, limits, folder and Python."""
    uid: Optional[int]                # None: this process's own user (not root)
    gid: Optional[int]
    folder: Path                      # its scratch working folder (its own, removed by close())
    python: str
    limits: Limits = Limits()
    network: bool = True              # False: a namespace of its own, loopback only (run as root)

    def enter(self) -> None:
        """``preexec_fn``: runs in the new process before exec, in this order (a failure stops the start)."""
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (self.limits.cpu_s, self.limits.cpu_s))
        resource.setrlimit(resource.RLIMIT_AS, (self.limits.memory_bytes, self.limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.limits.file_bytes, self.limits.file_bytes))
        if self.uid is not None:
            if not self.network:
                _no_network()
            resource.setrlimit(resource.RLIMIT_NPROC, (self.limits.processes, self.limits.processes))
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)     # after setuid, which clears it

    def env(self) -> dict:
        """A bare environment: none of the autograder's variables (tokens, paths) reach the submission."""
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.folder), "LANG": "C.UTF-8",
                "ALLOCATOR_REF_DEVICE": "sim", "MPLBACKEND": "Agg"}


    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)     # never follows a link the submission made


def _no_network() -> None:
    """A network namespace of its own (root only), with its loopback up: no route off the machine."""
    import fcntl
    import socket
    import struct
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


_UNSHARE: dict = {}


def can_cut_network() -> bool:
    """Whether a child of this process may get a network namespace of its own (root, and a kernel or
    container that allows it): tried once in a forked child.  Where it may not, submissions keep the
    network and describe() says so."""
    if "net" not in _UNSHARE:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _no_network()
                code = 0
            finally:
                os._exit(code)
        _UNSHARE["net"] = os.waitpid(pid, 0)[1] == 0
    return _UNSHARE["net"]


def submission_user(learner: Optional[str], slot: int) -> tuple[Optional[int], Optional[int]]:
    """(uid, gid) a submission runs as: the learner's own account (not root), else GRADER_UID_BASE + slot;
    (None, None) when this process is not root (it cannot change user)."""
    if not runs_as_root():
        return None, None
    try:
        account = pwd.getpwnam(learner) if learner else None
    except KeyError:
        account = None
    # A person's account only (uid 1000 and up, below the numeric ones): a folder named "daemon" or
    # "postgres" must not run its code as that system user, with that user's files.
    if account is not None and LOGIN_UID_MIN <= account.pw_uid < GRADER_UID_BASE:
        return account.pw_uid, account.pw_gid
    return GRADER_UID_BASE + slot, GRADER_UID_BASE + slot


_PYTHON_WORKS: dict = {}


def grader_python(uid: Optional[int], gid: Optional[int], package_root: str) -> str:
    """A Python that ``uid`` can run with this package: the grader_python setting
    ($ALLOCATOR_REF_GRADER_PYTHON), else this one (a course Python under /root, as pyenv installs it, is
    closed to other users)."""
    from .. import settings
    candidates = [p for p in (settings.value("grader_python"), sys.executable) if p]
    if uid is None:
        return candidates[0]
    for python in candidates:
        key = (python, uid)
        if key not in _PYTHON_WORKS:
            try:
                probe = subprocess.run([python, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                        "import allocator_ref.labs.check", package_root],
                                       user=uid, group=gid, extra_groups=[], cwd="/", capture_output=True,
                                       env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}, timeout=120)
            except OSError:       # uid may not even execute it (a symlink into /root: EACCES at exec)
                _PYTHON_WORKS[key] = False
                continue
            _PYTHON_WORKS[key] = probe.returncode == 0
        if _PYTHON_WORKS[key]:
            return python
    raise SandboxError(f"no Python that an unprivileged user can run with this course ({sys.executable} is "
                       f"closed to other users, e.g. under /root): run `python workshop/learner_python.py` (make "
                       f"workshop does) and set {GRADER_PYTHON_ENV} to the path it prints")


def describe(limits: Limits = Limits()) -> str:
    """One line for make autograde's log: where submissions run here, and what does not hold."""
    if not runs_as_root():
        who = "as you (not root: no user change and no network cut; grade a room with sudo)"
    else:
        who = "as each learner's own user, else a numeric one, " + (
            "with no network" if can_cut_network() else "WITH network (no namespace may be made here)")
    return (f"submissions run {who}; {limits.cpu_s} CPU s, {limits.memory_bytes >> 30} GiB, "
            f"{limits.processes} processes each")


def sandbox_for(learner: Optional[str], slot: int, package_root: str, limits: Limits = Limits()) -> Sandbox:
    """A fresh sandbox for one submission: its user, an empty scratch folder that user owns, its Python."""
    uid, gid = submission_user(learner, slot)
    python = grader_python(uid, gid, package_root)
    folder = Path(tempfile.mkdtemp(prefix="allocator-grade-"))
    if uid is not None:
        os.chown(folder, uid, gid)
    return Sandbox(uid, gid, folder, python, limits, network=uid is None or not can_cut_network())
