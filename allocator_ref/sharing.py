"""Share a caching-allocator block with another process, as PyTorch does (``torch.multiprocessing``'s CUDA IPC).

Two handle kinds, after PyTorch's ``shareIpcHandle`` type byte:

* ``'c'`` -- :class:`LegacyBlockHandle`: the block lives in a ``cudaMalloc``
  segment.  A legacy ``cudaIpcMemHandle`` can only name a whole allocation,
  so the handle is (handle of the *segment base*, offset of the block).  The
  receiver opens the segment (``cudaIpcOpenMemHandle``) and adds the offset.
* ``'e'`` -- :class:`ExpandableBlockHandle`: the block lives in an expandable
  segment (``cuMemCreate`` pages), which legacy IPC cannot export.  The handle
  carries one POSIX file descriptor per page covering the block
  (``cuMemExportToShareableHandle``).  PyTorch's receiver pulls the fds out of
  the sender with ``pidfd_getfd`` (which containers often forbid: learner
  question Q18); here they travel over a ``multiprocessing`` connection with
  ``SCM_RIGHTS`` (:func:`send_shared` / :func:`recv_shared`).  The receiver
  imports them, reserves a fresh virtual range and maps them there.

Lifetime rule (the one PyTorch enforces with reference counts and "limbo"
blocks): **the sender must keep the block alive while a receiver uses it.**
Freeing the block returns it to the sender's cache, where the next ``malloc``
may hand the same bytes to another tensor: on a GPU the receiver would read
silent garbage.  Here every share has a liveness token (a small file in
``/dev/shm``: an alive byte and the sender's start time); the sender's
allocator removes it when the block is freed, and the receiver's
:class:`SharedBlock` checks it on every access, raising
:class:`SenderFreedError` instead of returning stale bytes.  A sender that
exits removes its tokens (and the device retires exported segments), so a
receiver that outlives its sender gets the same clear error.  A sender killed
with SIGKILL cannot clean up: the next process that starts sharing sweeps the
files of dead processes (``shared_segment.sweep_dead_files``), including those
whose pid the kernel has since given to a newer process (its start time differs).

A receiver trusts nothing in a handle: every field is checked, the token must be
a regular file with the sender's name, and each file descriptor of an ``'e'``
handle must be the very memfd the sender exported (same device and inode) before
anything is mapped -- an fd number, once closed, may name another file.

Nor does it trust the token's *name*: ``/dev/shm`` is writable by every user, so
after the sender removes a token anyone can create a file of the same name, and
a handle relayed by someone else can name any pid and a token planted for it.
So, when a block is opened, the token must be owned by the user the sender
process runs as and record that process's start time, and the handle must be the
claimed sender's own (a legacy handle's ``cudaIpcMemHandle`` names its exporter;
an ``'e'`` handle's page memfds must be held open by that process, as the
sender holds them while it shares).  The receiver then remembers *which* file
the token is (device and inode): a file re-created at the name later is another
file, and the share stays ended (:class:`SenderFreedError`) for good.
"""
from __future__ import annotations

import atexit
import os
import re
import secrets
import stat
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from . import vmm
from .device.sim.shared_segment import process_start_ticks, shm_dir, sweep_once

__all__ = [
    "SharingError", "SenderFreedError", "LegacyBlockHandle", "ExpandableBlockHandle", "share_block",
    "unshare", "open_block", "SharedBlock", "send_shared", "recv_shared", "EXPANDABLE_LEGACY_MESSAGE",
    "active_shares", "RemoteReceiver", "RemoteSender",
]

# The idea of PyTorch's refusal in getBaseAllocation (CUDACachingAllocator.cpp).
EXPANDABLE_LEGACY_MESSAGE = (
    "Tensors allocated with expandable_segments:True cannot be shared between processes with a legacy "
    "cudaIpcMemHandle (their memory comes from cuMemCreate, which cudaIpcGetMemHandle cannot export). "
    "Share them with kind='expandable' (one POSIX fd per page, PyTorch's 'e' handle), or allocate the "
    "tensors to share with expandable_segments:False.")


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
        raise SenderFreedError(f"process {pid} freed the shared block (or unshared it) before it was "
                               "opened: its memory may already hold another tensor") from None
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


def _check_sender_owns(handle: Any) -> None:
    """The handle must be the claimed sender's own, not one relayed under another pid."""
    pid = handle.sender_pid
    if isinstance(handle, LegacyBlockHandle):
        from .device.sim.ipc import handle_exporter_pid
        exporter = handle_exporter_pid(handle.ipc_handle)      # None: a real GPU's opaque handle
        if exporter is not None and exporter != pid:
            raise SharingError(f"the handle says process {pid} shares this block, but its cudaIpcMemHandle "
                               f"was exported by process {exporter} (a relabelled handle); nothing was opened")
        return
    if not os.path.isdir("/proc/self/fd"):
        return                                  # no /proc (not Linux): nothing to compare with
    held = set()
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                st = os.stat(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            held.add((st.st_dev, st.st_ino))
    except OSError:
        raise SharingError(f"cannot check that process {pid} exported these pages (its open files are "
                           "not readable from here): a handle relabelled with another pid?  Nothing "
                           "was mapped") from None
    if not all(tuple(identity) in held for identity in handle.identities):
        raise SharingError(f"process {pid} does not hold the pages this handle names: it did not share "
                           "them (a relabelled handle) or has ended the share; nothing was mapped")


# ------------------------------------------------------------------ handles

@dataclass(frozen=True)
class LegacyBlockHandle:
    """PyTorch's ``'c'`` handle: the segment base's ``cudaIpcMemHandle`` + the block's offset."""

    ipc_handle: bytes          # 64 bytes naming the whole cudaMalloc segment
    offset: int                # block address - segment base
    size: int                  # the block's size
    segment_size: int
    sender_pid: int
    token: str
    kind: str = "c"


@dataclass(frozen=True)
class ExpandableBlockHandle:
    """PyTorch's ``'e'`` handle idea: ``{pid, segment_size, num_handles}`` + one fd per page."""

    sender_pid: int
    page_size: int
    offset: int                # block address - start of its first page
    size: int                  # the block's size
    num_pages: int
    segment_size: int          # the sender's whole reservation (PyTorch's receiver reserves this much)
    token: str
    fds: tuple = ()            # the fds, valid in the process that holds this handle
    identities: tuple = ()     # (st_dev, st_ino) of each page's memfd: what each fd must name
    kind: str = "e"


# ------------------------------------------------------------------ sender

@dataclass
class _Share:
    handle: Any
    ptr: int
    fds: list = field(default_factory=list)


class _Exports:
    """Per allocator: the blocks it shares; a trace listener kills a share when its block is freed."""

    def __init__(self, allocator: Any) -> None:
        self.by_ptr: dict[int, list[_Share]] = {}
        self.stop = allocator.trace.add_listener(self._on_event)

    def _on_event(self, entry: Any) -> None:
        if entry.action == "free_requested" and entry.addr in self.by_ptr:
            for share in self.by_ptr.pop(entry.addr):
                _end_share(share)


_EXPORTS: "weakref.WeakKeyDictionary[Any, _Exports]" = weakref.WeakKeyDictionary()
_SHARES: dict[str, _Share] = {}            # token -> share, in the sender


def _end_share(share: _Share) -> None:
    _remove_token(share.handle.token)      # receivers now get SenderFreedError
    for fd in share.fds:
        os.close(fd)
    share.fds.clear()
    _SHARES.pop(share.handle.token, None)


def _block_of(allocation: Any) -> Any:
    block = getattr(allocation, "_block", None)
    if block is None or getattr(allocation, "freed", False) or not block.allocated:
        raise SharingError("share_block needs a live allocation returned by CachingAllocator.malloc "
                           "(not freed, not null)")
    return block


def share_block(allocator: Any, allocation: Any, kind: str = "auto") -> Any:
    """Export a live block for another process; returns a picklable handle.

    ``kind``: ``"legacy"`` (``'c'``), ``"expandable"`` (``'e'``) or ``"auto"``
    (whichever the block's segment allows).  The block must stay allocated
    while receivers use it; freeing it ends the share (receivers get
    :class:`SenderFreedError`).
    """
    if kind not in ("auto", "legacy", "expandable"):
        raise ValueError(f"kind must be 'auto', 'legacy' or 'expandable', got {kind!r}")
    block = getattr(allocation, "_block", None)
    if block is not None and not hasattr(block, "expandable_segment"):
        raise SharingError(f"share_block shares CachingAllocator blocks only, not a {type(allocator).__name__}'s: "
                           "PyTorch's backend:cudaMallocAsync does not support IPC either "
                           "(torch.multiprocessing: the producer must keep the tensor alive)")
    block = _block_of(allocation)
    seg = block.expandable_segment
    if kind == "auto":
        kind = "expandable" if seg is not None else "legacy"
    dev = allocator.device
    if kind == "legacy":
        if seg is not None:
            raise SharingError(EXPANDABLE_LEGACY_MESSAGE)
        base = block
        while base.prev is not None:        # the segment base: what cudaIpcGetMemHandle can name
            base = base.prev
        seg_size, b = 0, base
        while b is not None:
            seg_size += b.size
            b = b.next
        handle = LegacyBlockHandle(dev.ipc_get_mem_handle(base.ptr), block.ptr - base.ptr, block.size,
                                   seg_size, os.getpid(), _new_token())
        share = _Share(handle, block.ptr)
    else:
        if seg is None:
            raise SharingError("kind='expandable' needs a block from an expandable segment "
                               "(expandable_segments:True); this one is in a cudaMalloc segment: "
                               "use kind='legacy'")
        first = (block.ptr - seg.ptr) // seg.page_size
        last = -(-(block.ptr + block.size - seg.ptr) // seg.page_size)
        fds = []
        try:
            for i in range(first, last):
                fds.append(dev.mem_export_fd(seg.handles[i]))    # cuMemExportToShareableHandle
        except Exception:
            for fd in fds:
                os.close(fd)
            raise
        identities = tuple((st.st_dev, st.st_ino) for st in map(os.fstat, fds))
        handle = ExpandableBlockHandle(os.getpid(), seg.page_size, block.ptr - (seg.ptr + first * seg.page_size),
                                       block.size, last - first, seg.size(), _new_token(), tuple(fds),
                                       identities)
        share = _Share(handle, block.ptr, fds)
    exports = _EXPORTS.get(allocator)
    if exports is None:
        exports = _EXPORTS[allocator] = _Exports(allocator)
    exports.by_ptr.setdefault(block.ptr, []).append(share)
    _SHARES[handle.token] = share
    return handle


def unshare(handle: Any) -> None:
    """Sender side: end a share without freeing the block (receivers get SenderFreedError)."""
    share = _SHARES.get(handle.token)
    if share is None:
        return
    for exports in list(_EXPORTS.values()):
        shares = exports.by_ptr.get(share.ptr, [])
        if share in shares:
            shares.remove(share)
            if not shares:
                del exports.by_ptr[share.ptr]
    _end_share(share)


def active_shares() -> int:
    """How many shares this process still exports (0 once every block was freed or unshared)."""
    return len(_SHARES)


# ------------------------------------------------------------------ transport

def send_shared(conn: Any, handle: Any) -> None:
    """Send a handle over a ``multiprocessing`` connection; an ``'e'`` handle's fds go as SCM_RIGHTS."""
    from multiprocessing import reduction
    if isinstance(handle, ExpandableBlockHandle):
        conn.send(replace(handle, fds=()))
        for fd in handle.fds:
            reduction.send_handle(conn, fd, handle.sender_pid)
    else:
        conn.send(handle)


def recv_shared(conn: Any) -> Any:
    """Receive what :func:`send_shared` sent; an ``'e'`` handle comes back with fds valid here."""
    from multiprocessing import reduction
    handle = conn.recv()
    if isinstance(handle, ExpandableBlockHandle):
        fds = tuple(reduction.recv_handle(conn) for _ in range(handle.num_pages))
        handle = replace(handle, fds=fds)
    return handle


# ------------------------------------------------------------------ receiver

class SharedBlock:
    """A block another process shares with this one, opened on this process's device.

    ``ptr`` is the address here.  Use :meth:`read`/:meth:`write`/:meth:`fill`
    (they check that the sender still holds the block), then :meth:`close`.
    """

    def __init__(self, dev: Any, handle: Any) -> None:
        if not isinstance(handle, (LegacyBlockHandle, ExpandableBlockHandle)):
            raise SharingError(f"not a block handle: a {type(handle).__name__}; pass what share_block "
                               "returned (received with recv_shared)")
        self.device, self.handle = dev, handle
        self.size = handle.size
        self.closed = False
        self._token_id: Optional[tuple] = None
        self._gone = False
        if isinstance(handle, LegacyBlockHandle):
            _check_fields(handle)
            self._bind(handle)
            self._check()                                  # refuse a handle that is already dead
            self._open_legacy(handle)
            return
        if _CONSUMED.get(id(handle)) is handle:
            raise SharingError("this 'e' handle was already opened once in this process: its file "
                               "descriptors were consumed then (an fd number, once closed, may name "
                               "another file).  Receive the share again with recv_shared(conn)")
        if not handle.fds:
            raise SharingError("this 'e' handle carries no file descriptors: receive it with "
                               "recv_shared(conn) (they travel as SCM_RIGHTS), not plain pickling")
        # Only fds proven to be the sender's pages are ever closed here: an unverified number
        # may belong to another file of this process.
        ours = _own_fds(handle)
        try:
            if len(handle.fds) != handle.num_pages:
                raise SharingError(f"this 'e' handle names {handle.num_pages!r} pages but carries "
                                   f"{len(handle.fds)} file descriptors")
            _check_fields(handle)
            if len(ours) != len(handle.fds):
                bad = next(i for i, fd in enumerate(handle.fds) if fd not in ours)
                raise SharingError(f"file descriptor {handle.fds[bad]!r} (page {bad}) is not the memory "
                                   f"process {handle.sender_pid} exported: the number now names another "
                                   "file, or the handle was forged.  Nothing was mapped")
            if any(os.fstat(fd).st_size != handle.page_size for fd in ours):
                raise SharingError(f"the pages are not {handle.page_size} bytes each, as the handle says")
            self._bind(handle)
            self._check()
            self._open_expandable(handle)
        finally:
            _CONSUMED[id(handle)] = handle
            for fd in ours:                # the imported handles hold their own references
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _open_legacy(self, handle: LegacyBlockHandle) -> None:
        dev = self.device
        self._base = dev.ipc_open_mem_handle(handle.ipc_handle)     # cudaIpcOpenMemHandle
        mapped = dev.ipc_mapped_size(self._base) if hasattr(dev, "ipc_mapped_size") else handle.segment_size
        if handle.offset + handle.size > mapped:
            dev.ipc_close_mem_handle(self._base)
            raise SharingError(f"the handle's block [{handle.offset}, {handle.offset + handle.size}) lies "
                               f"outside the {mapped}-byte segment it names (a forged offset or size)")
        self.ptr = self._base + handle.offset
        self.reserved = 0

    def _open_expandable(self, handle: ExpandableBlockHandle) -> None:
        dev = self.device
        span = handle.num_pages * handle.page_size
        self._range = vmm.reserve_range(dev, span)          # a fresh reservation for the pages
        self.reserved = span
        self._pages: list[int] = []
        try:
            for i, fd in enumerate(handle.fds):
                h = dev.mem_import_fd(fd)                        # cuMemImportFromShareableHandle
                self._pages.append(h)
                vmm.map_and_grant(dev, self._range + i * handle.page_size, handle.page_size, h)
        except Exception:
            self._close_expandable()
            raise
        self.ptr = self._range + handle.offset

    def _bind(self, handle: Any) -> None:
        if not _pid_alive(handle.sender_pid):
            return                                         # _check says "exited"
        self._token_id = _bind_token(handle)              # first: a freed share says so
        _check_sender_owns(handle)

    def _check(self) -> None:
        if getattr(self, "closed", False):
            raise SharingError("this SharedBlock was closed")
        state = "gone" if self._gone else _token_state(self.handle.token, self._token_id)
        if state == "gone":
            self._gone = True                              # an ended share never comes back
        if state == "bad":
            raise SharingError(f"the handle's token {self.handle.token!r} is not a liveness token made by "
                               "share_block (a forged handle?)")
        if not _pid_alive(self.handle.sender_pid):
            raise SenderFreedError(
                f"process {self.handle.sender_pid} that shared this block has exited (or released the "
                "share): the memory is gone.  A sender must outlive its receivers.")
        if state == "gone":
            raise SenderFreedError(
                f"process {self.handle.sender_pid} freed the shared block (or unshared it): its memory may "
                "already hold another tensor.  The sender must keep the block allocated until every "
                "receiver has closed it.")

    def _span(self, offset: int, nbytes: int) -> None:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError(f"[{offset}, {offset + nbytes}) is outside the shared {self.size}-byte block")

    def read(self, offset: int = 0, nbytes: Optional[int] = None) -> bytes:
        self._check()
        nbytes = self.size - offset if nbytes is None else nbytes
        self._span(offset, nbytes)
        return self.device.read(self.ptr + offset, nbytes)

    def write(self, data: bytes, offset: int = 0) -> None:
        self._check()
        self._span(offset, len(data))
        self.device.write(self.ptr + offset, bytes(data))

    def fill(self, value: int, offset: int = 0, nbytes: Optional[int] = None) -> None:
        self._check()
        nbytes = self.size - offset if nbytes is None else nbytes
        self._span(offset, nbytes)
        self.device.fill(self.ptr + offset, nbytes, value)

    def _close_expandable(self) -> None:
        dev = self.device
        for i, h in enumerate(self._pages):
            try:
                vmm.unmap(dev, self._range + i * self.handle.page_size, self.handle.page_size)
            except Exception:
                pass                                 # never mapped (failed half way)
            vmm.release(dev, h)
        self._pages = []
        vmm.free_range(dev, self._range, self.reserved)

    def close(self) -> None:
        """Unmap here (``cudaIpcCloseMemHandle``, or unmap + release + free the range).  Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.device.synchronize()
        if isinstance(self.handle, LegacyBlockHandle):
            self.device.ipc_close_mem_handle(self._base)
        else:
            self._close_expandable()

    def __enter__(self) -> "SharedBlock":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"SharedBlock(kind={self.handle.kind!r}, ptr={self.ptr:#x}, size={self.size}, "
                f"from pid {self.handle.sender_pid}{', closed' if self.closed else ''})")


_CONSUMED: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()  # 'e' handles opened here


def _is_count(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < 2**60


def _check_fields(handle: Any) -> None:
    """Every field of a received handle in range, before anything is opened or mapped."""
    def bad(what: str):
        raise SharingError(f"invalid {handle.kind!r} handle: {what} (make handles with share_block)")
    if not _is_count(handle.sender_pid, 1):
        bad(f"sender_pid {handle.sender_pid!r}")
    if not _is_count(handle.size, 1) or not _is_count(handle.offset):
        bad(f"size {handle.size!r} / offset {handle.offset!r}")
    token = handle.token
    match = _TOKEN_NAME.match(os.path.basename(token)) if isinstance(token, str) else None
    if match is None or os.path.dirname(token) != _TOKEN_DIR or int(match.group(1)) != handle.sender_pid:
        bad(f"token {token!r} is not process {handle.sender_pid}'s liveness token in {_TOKEN_DIR}")
    if isinstance(handle, LegacyBlockHandle):
        if not isinstance(handle.ipc_handle, bytes) or len(handle.ipc_handle) != 64:
            bad("ipc_handle is not 64 bytes")
        if not _is_count(handle.segment_size, 1) or handle.offset + handle.size > handle.segment_size:
            bad(f"block [{handle.offset}, {handle.offset + handle.size}) outside its "
                f"{handle.segment_size!r}-byte segment")
        return
    page = handle.page_size
    if not _is_count(page, 1) or not _is_count(handle.num_pages, 1) or handle.offset >= page:
        bad(f"page_size {page!r}, num_pages {handle.num_pages!r}, offset {handle.offset!r}")
    if -(-(handle.offset + handle.size) // page) != handle.num_pages:
        bad(f"{handle.num_pages} pages of {page} bytes do not cover [{handle.offset}, "
            f"{handle.offset + handle.size})")
    if not _is_count(handle.segment_size) or handle.segment_size < handle.num_pages * page:
        bad(f"segment_size {handle.segment_size!r}")
    if not isinstance(handle.identities, tuple) or len(handle.identities) != handle.num_pages:
        bad("no page identities (each fd must be bound to the memfd it names)")


def _own_fds(handle: ExpandableBlockHandle) -> list:
    """The handle's fds that name exactly the memfd the sender exported for that page."""
    ours = []
    if not isinstance(handle.identities, tuple) or len(handle.identities) != len(handle.fds):
        return ours
    for fd, identity in zip(handle.fds, handle.identities):
        if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
            continue
        try:
            info = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and isinstance(identity, (tuple, list)) \
                and (info.st_dev, info.st_ino) == tuple(identity):
            ours.append(fd)
    return ours


def open_block(dev: Any, handle: Any) -> SharedBlock:
    """Receiver side: map a shared block on ``dev`` (a device of *this* process)."""
    return SharedBlock(dev, handle)


# ------------------------------------------------------------------ a second process, for chapters and tests

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _open_child_device(kind: Optional[str], profile: Optional[str]):
    import contextlib
    import io
    from .device import open_device
    with contextlib.redirect_stdout(io.StringIO()):
        return open_device(kind, profile)


def _leaks(dev: Any) -> dict:
    """What a device still holds that sharing could have left behind (sim: exact; GPU: best effort)."""
    return {"imports": len(getattr(dev, "_imports", {})), "handles": len(getattr(dev, "_handles", {})),
            "reservations": len(getattr(dev, "_reservations", {})),
            "exports": len(getattr(dev, "_exports", {})), "shares": active_shares()}


def _reply(conn: Any, fn) -> None:
    try:
        conn.send(("ok", fn()))
    except Exception as e:              # the parent re-raises it with the same meaning
        conn.send(("error", type(e).__name__, str(e)))


def _receiver_main(conn: Any, kind: Optional[str], profile: Optional[str]) -> None:
    dev = _open_child_device(kind, profile)
    blocks: dict[int, SharedBlock] = {}
    while True:
        cmd, *args = conn.recv()
        if cmd == "open":
            handle = recv_shared(conn)
            def do_open():
                b = open_block(dev, handle)
                blocks[id(b)] = b
                return id(b), b.ptr
            _reply(conn, do_open)
        elif cmd == "read":
            _reply(conn, lambda: blocks[args[0]].read(args[1], args[2]))
        elif cmd == "write":
            _reply(conn, lambda: blocks[args[0]].write(args[1], args[2]))
        elif cmd == "close":
            _reply(conn, lambda: blocks.pop(args[0]).close())
        elif cmd == "leaks":
            _reply(conn, lambda: _leaks(dev))
        elif cmd == "exit":
            for b in blocks.values():
                b.close()
            dev.close()
            conn.send(("ok", None))
            return


def _sender_main(conn: Any, kind: Optional[str], profile: Optional[str], config: str, nbytes: int,
                 share_kind: str, payload: bytes) -> None:
    from .caching import CachingAllocator
    dev = _open_child_device(kind, profile)
    alloc = CachingAllocator(dev, config)
    held = {}
    while True:
        cmd, *args = conn.recv()
        if cmd == "share":
            def do_share():
                a = alloc.malloc(nbytes)
                dev.write(a.ptr, payload)
                dev.synchronize()
                held["a"] = a
                return share_block(alloc, a, share_kind)
            try:
                handle = do_share()
            except Exception as e:
                conn.send(("error", type(e).__name__, str(e)))
                continue
            conn.send(("ok", None))
            send_shared(conn, handle)
        elif cmd == "free":
            _reply(conn, lambda: alloc.free(held.pop("a")))
        elif cmd == "exit":
            conn.send(("ok", None))
            return                       # exits without cleaning up: atexit retires tokens and segments


def _raise_remote(reply: tuple) -> Any:
    if reply[0] == "ok":
        return reply[1]
    _, name, text = reply
    cls = {"SenderFreedError": SenderFreedError, "SharingError": SharingError}.get(name, SharingError)
    err = cls(text if cls is not SharingError or name == "SharingError" else f"in the other process: {name}: {text}")
    err.remote_type = name
    raise err


class _Peer:
    def __init__(self, target, *args) -> None:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")        # never fork after CUDA was initialised (learner question Q22)
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=target, args=(child,) + args, daemon=True)
        self.process.start()
        child.close()

    def call(self, *msg) -> Any:
        self.conn.send(msg)
        return _raise_remote(self.conn.recv())

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.call("exit")
            except (EOFError, OSError):
                pass
        self.process.join(30)
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def pid(self) -> int:
        return self.process.pid


class RemoteReceiver(_Peer):
    """A second OS process (spawn) with its own device that opens blocks this process shares.

        with RemoteReceiver() as peer:
            ref = peer.open(share_block(a, x))     # the receiver maps the block
            peer.read(ref, 0, 8)                   # bytes the sender wrote, read over there
    """

    def __init__(self, kind: Optional[str] = None, profile: Optional[str] = None) -> None:
        super().__init__(_receiver_main, kind, profile)

    def open(self, handle: Any) -> int:
        self.conn.send(("open",))
        send_shared(self.conn, handle)
        ref, self.last_ptr = _raise_remote(self.conn.recv())
        return ref

    def read(self, ref: int, offset: int = 0, nbytes: Optional[int] = None) -> bytes:
        return self.call("read", ref, offset, nbytes)

    def write(self, ref: int, data: bytes, offset: int = 0) -> None:
        self.call("write", ref, bytes(data), offset)

    def close_block(self, ref: int) -> None:
        self.call("close", ref)

    def leaks(self) -> dict:
        return self.call("leaks")


class RemoteSender(_Peer):
    """A second OS process that allocates a block with its own caching allocator and shares it here."""

    def __init__(self, nbytes: int, payload: bytes, config: str = "", share_kind: str = "auto",
                 kind: Optional[str] = None, profile: Optional[str] = None) -> None:
        super().__init__(_sender_main, kind, profile, config, nbytes, share_kind, bytes(payload))

    def share(self) -> Any:
        self.call("share")
        return recv_shared(self.conn)

    def free(self) -> None:
        self.call("free")

    def exit(self) -> None:
        """The sender process exits (its device and tokens go with it)."""
        self.close()
