"""The liveness token: how a receiver learns that the sender freed a shared block.

One of the three ideas of ``allocator_ref/sharing/`` (handles.py: what a share is and how it is
opened; harness.py: a second process to try it with).  This one sits at the bottom: the handles
make and check tokens, nothing here knows what a handle is beyond its ``token`` and ``sender_pid``.

Lifetime rule (the one PyTorch enforces with reference counts and "limbo" blocks:
``CudaIPCSentData`` and ``CudaIPCSentDataLimbo`` in torch/csrc/CudaIPCTypes.h): **the sender must
keep the block alive while a receiver uses it.** Freeing the block returns it to the sender's cache,
where the next ``malloc`` may hand the same bytes to another tensor: on a GPU the receiver would
read silent garbage. Here every share has a liveness token, a small file in ``/dev/shm`` holding an
alive byte and the sender's start time. The sender removes it when its allocator frees the block
(handles.py listens to the allocator's trace), and the receiver's
:class:`~allocator_ref.sharing.SharedBlock` checks it on every access, raising
:class:`SenderFreedError` instead of returning stale bytes. A sender that exits removes its tokens
(``atexit``; its device retires the segments it exported), so a receiver that outlives its sender
gets the same clear error. A sender killed with SIGKILL cannot clean up: the next process that
starts sharing sweeps the files of dead processes (``shared_segment.sweep_dead_files``), including
those whose pid the kernel has since given to a newer process (its start time differs).

A receiver does not trust a token's *name*: ``/dev/shm`` is writable by every user, so after the
sender removes a token anyone can create a file of the same name.  So, when a block is opened
(:func:`_bind_token`), the token must be a regular file owned by the user the sender process runs
as and must record that process's start time; the receiver then remembers *which* file it is
(device and inode).  A file re-created at the name later is another file, and the share stays
ended (:class:`SenderFreedError`) for good (:func:`_token_state`).

The package's two errors are defined here, in its lowest file, because a token is the first thing
to raise them; handles.py and harness.py raise the same classes.
"""
from __future__ import annotations

import atexit
import os
import re
import secrets
import stat
from typing import Any, Optional

from ..device.sim.shared_segment import process_start_ticks, shm_dir, sweep_once
from ..editions.messages import translator

tr = translator("doctor")                # a learner-facing refusal in the reader's language


class SharingError(RuntimeError):
    """A block cannot be shared, or a shared block cannot be used."""


class SenderFreedError(SharingError):
    """The sender freed the shared block (or exited): its bytes may already belong to another tensor."""


_TOKEN_DIR = str(shm_dir())
_TOKEN_NAME = re.compile(r"^allocator_ref_share_(\d+)_[0-9a-f]{16}$")
_MY_TOKENS: set = set()


def _cleanup_tokens() -> None:
    for path in list(_MY_TOKENS):
        _remove_token(path)


atexit.register(_cleanup_tokens)


def _new_token() -> str:
    sweep_once()                       # files left by senders killed without cleaning up
    path = os.path.join(_TOKEN_DIR, f"allocator_ref_share_{os.getpid()}_{secrets.token_hex(8)}")
    # A new file or nothing: never write through a planted file or link at the name.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        # The alive byte, then this process's start time: the sweep tells a reused pid by it,
        # and a receiver checks it against the sender's.
        f.write(b"\x01" + f"{process_start_ticks(os.getpid())}\n".encode())
    _MY_TOKENS.add(path)
    return path


def _remove_token(path: str) -> None:
    _MY_TOKENS.discard(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _token_state(path: str, bound: Optional[tuple] = None) -> str:
    """"alive" while the sender holds the block, "gone" once it freed it or exited.
    ``bound``: the (st_dev, st_ino) the token had when the block was opened; another file at
    the name now means the share ended and someone re-created the name ("gone")."""
    try:
        # A FIFO planted at the path must not block us, nor a link lead elsewhere.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "bad" if bound is None else "gone"
    try:
        info = os.fstat(fd)
        if bound is not None and (info.st_dev, info.st_ino) != bound:
            return "gone"
        if not stat.S_ISREG(info.st_mode):
            return "bad"
        return "alive" if os.read(fd, 1) == b"\x01" else "bad"
    finally:
        os.close(fd)


def _process_uid(pid: int) -> Optional[int]:
    """The user process ``pid`` runs as (None where /proc cannot say)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _bind_token(handle: Any) -> tuple:
    """Check that the token is the claimed sender's and return its (st_dev, st_ino)."""
    path, pid = handle.token, handle.sender_pid
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise SenderFreedError(tr("process {pid} freed the shared block (or unshared it) before it was "
                                  "opened: its memory may already hold another tensor", pid=pid)) from None
    except OSError:
        raise SharingError(f"the handle's token {path!r} is not a liveness token made by share_block "
                           "(a forged handle?)") from None
    try:
        info = os.fstat(fd)
        head = os.read(fd, 64) if stat.S_ISREG(info.st_mode) else b""
    finally:
        os.close(fd)
    if not stat.S_ISREG(info.st_mode) or head[:1] != b"\x01":
        raise SharingError(f"the handle's token {path!r} is not a liveness token made by share_block "
                           "(a forged handle?)")
    owner = _process_uid(pid)
    if owner is not None and info.st_uid != owner:
        raise SharingError(f"the handle's token {path!r} belongs to user {info.st_uid}, not to user {owner} "
                           f"that process {pid} runs as: someone else made it (a planted token); "
                           "nothing was opened")
    recorded = head[1:].split(b"\n", 1)[0]
    started = process_start_ticks(pid)
    if recorded.isdigit() and int(recorded) and started and int(recorded) != started:
        raise SharingError(f"the handle's token {path!r} records another process than the one now "
                           f"running as pid {pid} (its start time differs): a stale or planted token")
    return info.st_dev, info.st_ino

