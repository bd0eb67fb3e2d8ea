"""Share a caching-allocator block with another process, as PyTorch does (``torch.multiprocessing``'s CUDA IPC).

One of the three ideas of ``allocator_ref/sharing/``: what a handle is, how the sender makes one
(:func:`share_block`), how it travels (:func:`send_shared` / :func:`recv_shared`) and how the
receiver opens it (:class:`SharedBlock`).  Each share's liveness is the token's idea (tokens.py,
below this file); a second process to try all this with is harness.py's (above it).

Two handle kinds, after the type byte of PyTorch's ``shareIpcHandle`` (CUDACachingAllocator.cpp):

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

A receiver trusts nothing in a handle: every field is checked, the token must be
a regular file with the sender's name, and each file descriptor of an ``'e'``
handle must be the very memfd the sender exported (same device and inode) before
anything is mapped -- an fd number, once closed, may name another file.  A handle
relayed by someone else can name any pid and a token planted for it, so the handle
must also be the claimed sender's own (:func:`_check_sender_owns`: a legacy handle's
``cudaIpcMemHandle`` names its exporter; an ``'e'`` handle's page memfds must be held
open by that process, as the sender holds them while it shares).
"""
from __future__ import annotations

import os
import stat
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from .. import vmm
from ..device.sim.shared_segment import pid_alive
from ..editions.messages import say, translator
from .tokens import (_TOKEN_DIR, _TOKEN_NAME, SenderFreedError, SharingError, _bind_token,
                     _new_token, _remove_token, _token_state)

tr = translator("doctor")                # a learner-facing refusal in the reader's language
N_ = translator("doctor", later=True)

# The idea of PyTorch's refusal in getBaseAllocation (CUDACachingAllocator.cpp); English as written
# (kept importable), raised in the reader's language with say("doctor", ...).
EXPANDABLE_LEGACY_MESSAGE = N_(
    "Tensors allocated with expandable_segments:True cannot be shared between processes with a legacy "
    "cudaIpcMemHandle (their memory comes from cuMemCreate, which cudaIpcGetMemHandle cannot export). "
    "Share them with kind='expandable' (one POSIX fd per page, PyTorch's 'e' handle), or allocate the "
    "tensors to share with expandable_segments:False.")


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
        raise SharingError(tr("share_block shares CachingAllocator blocks only, not a {kind}'s: "
                              "PyTorch's backend:cudaMallocAsync does not support IPC either "
                              "(torch.multiprocessing: the producer must keep the tensor alive)",
                              kind=type(allocator).__name__))
    block = _block_of(allocation)
    seg = block.expandable_segment
    if kind == "auto":
        kind = "expandable" if seg is not None else "legacy"
    dev = allocator.device
    if kind == "legacy":
        if seg is not None:
            raise SharingError(say("doctor", EXPANDABLE_LEGACY_MESSAGE))
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
        if not pid_alive(handle.sender_pid):
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
        if not pid_alive(self.handle.sender_pid):
            raise SenderFreedError(tr(
                "process {pid} that shared this block has exited (or released the "
                "share): the memory is gone.  A sender must outlive its receivers.", pid=self.handle.sender_pid))
        if state == "gone":
            raise SenderFreedError(tr(
                "process {pid} freed the shared block (or unshared it): its memory may "
                "already hold another tensor.  The sender must keep the block allocated until every "
                "receiver has closed it.", pid=self.handle.sender_pid))

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


def _check_sender_owns(handle: Any) -> None:
    """The handle must be the claimed sender's own, not one relayed under another pid."""
    pid = handle.sender_pid
    if isinstance(handle, LegacyBlockHandle):
        from ..device.sim.ipc import handle_exporter_pid
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


def open_block(dev: Any, handle: Any) -> SharedBlock:
    """Receiver side: map a shared block on ``dev`` (a device of *this* process)."""
    return SharedBlock(dev, handle)

