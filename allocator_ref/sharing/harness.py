"""A second OS process to share blocks with, for chapter 6, lab 6 and the tests.

One of the three ideas of ``allocator_ref/sharing/``, and the top one: it drives handles.py (make,
send, open a share) from two processes, as ``torch.multiprocessing`` would, and knows nothing of
tokens beyond what the errors say.  :class:`RemoteReceiver` is a process that opens what this one
shares; :class:`RemoteSender` is a process that shares a block of its own allocator with this one.
Each runs a small command loop (``_receiver_main`` / ``_sender_main``) over a ``multiprocessing``
pipe; an error over there comes back here as the same :class:`SharingError` or
:class:`SenderFreedError` (``_raise_remote``).
"""
from __future__ import annotations

from typing import Any, Optional

from .handles import SharedBlock, active_shares, open_block, recv_shared, send_shared, share_block
from .tokens import SenderFreedError, SharingError

def _open_child_device(kind: Optional[str], profile: Optional[str]):
    import contextlib
    import io
    from ..device import open_device
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
    from ..caching import CachingAllocator
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
