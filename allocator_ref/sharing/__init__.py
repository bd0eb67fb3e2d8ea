"""Share a caching-allocator block with another process, as PyTorch does (``torch.multiprocessing``'s CUDA IPC).

Three ideas, one file each, lowest first (each imports only the ones above it in this list):

tokens.py   the liveness token in ``/dev/shm``: how a receiver learns the sender freed the block
            (:class:`SenderFreedError`), and why a token is trusted only when its owner, start
            time and inode are the sender's
handles.py  the ``'c'`` and ``'e'`` handles (after PyTorch's ``shareIpcHandle``): made by
            :func:`share_block`, sent with :func:`send_shared`, opened as a :class:`SharedBlock`
harness.py  a second OS process (:class:`RemoteReceiver`, :class:`RemoteSender`) to try it with

A package rather than three sibling files so that ``from allocator_ref.sharing import share_block``
and ``from allocator_ref import sharing`` keep meaning what chapters 5 and 6, lab 6 and the tests
wrote: this file re-exports every public name.
"""
from __future__ import annotations

from .handles import (EXPANDABLE_LEGACY_MESSAGE, ExpandableBlockHandle, LegacyBlockHandle, SharedBlock,
                      active_shares, open_block, recv_shared, send_shared, share_block, unshare)
from .harness import RemoteReceiver, RemoteSender
from .tokens import SenderFreedError, SharingError


__all__ = [
    "SharingError", "SenderFreedError", "LegacyBlockHandle", "ExpandableBlockHandle", "share_block",
    "unshare", "open_block", "SharedBlock", "send_shared", "recv_shared", "EXPANDABLE_LEGACY_MESSAGE",
    "active_shares", "RemoteReceiver", "RemoteSender",
]
