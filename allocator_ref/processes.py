"""Ending every process that code we ran started, and nothing else (Linux; elsewhere these do nothing).

Three runners start code they do not trust and must leave nothing of it behind: ``check()``'s forked
child (labs/deadline.py), the autograder's judges and their submissions (labs/regrade.py), and
``predict``'s recording child (predict/sandbox.py).  A process group is not enough: code can leave
it (``os.setsid()`` in a double-forked grandchild) and its orphan goes to init.  What is:

* a *subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): orphans below it are re-parented to it, not to
  init, so they stay in its tree;
* a walk of that tree in ``/proc`` (parent links), killed with ``SIGKILL`` in rounds: what forks while
  another dies is found in the next round.

Only the tree of what was started is ended: a caller's own children (a kernel's, a test's hub) are
named in ``skip`` and left alone.  One module, imported by labs and predict alike (it imports nothing
of the package).
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where it failed or there is none (not Linux)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def subreaper(on: bool = True) -> bool:
    """Make this process a subreaper (or stop being one); True where that worked."""
    return prctl(PR_SET_CHILD_SUBREAPER, int(on))


def is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value == 1
    except (OSError, AttributeError):
        return False


def _table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state letter)} of every process in /proc."""
    found = {}
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:                          # ended meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()   # the name may hold spaces and ')'
        found[int(entry)] = (int(fields[1]), fields[0].decode())
    return found


def children(of: int | None = None) -> set[int]:
    """The pids whose parent is ``of`` (this process)."""
    of = os.getpid() if of is None else of
    return {pid for pid, (parent, _) in _table().items() if parent == of}


def descendants(root: int, skip: frozenset = frozenset()) -> list[int]:
    """Every process below ``root``, but those under a pid in ``skip``; a zombie only when it is this
    process's own (to be reaped): another's is already dead and its children re-parented."""
    me, below = os.getpid(), {}
    for pid, (parent, state) in _table().items():
        if state != "Z" or parent == me:
            below.setdefault(parent, []).append(pid)
    out, todo = [], [p for p in below.get(root, []) if p not in skip]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(below.get(pid, []))
    return out


def _kill_and_reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:                # not ours (yet): a later round reaps it
            pass


def end_descendants(skip: frozenset = frozenset(), rounds: int = 200) -> None:
    """SIGKILL every descendant of this process (but those under ``skip``) and reap its own, until none
    is left: a process forking as fast as it can is outrun, because each round kills every one found
    and orphans come back here when this process is their subreaper."""
    for _ in range(rounds):
        found = descendants(os.getpid(), skip)
        if not found:
            return
        _kill_and_reap(found)
        time.sleep(0.01)


def end_tree(root: int, rounds: int = 200) -> None:
    """SIGKILL ``root`` (a child of this process that made itself a subreaper) and all below it.
    ``root`` is stopped first, so it starts nothing more; what is below it dies, and their orphans
    come back to it, until nothing is; then ``root`` itself, reaped by the caller."""
    try:
        os.kill(root, signal.SIGSTOP)
    except OSError:                              # gone already
        return
    for _ in range(rounds):
        found = descendants(root)
        if not found:
            break
        _kill_and_reap(found)
        time.sleep(0.01)
    try:
        os.kill(root, signal.SIGKILL)
    except OSError:
        pass
