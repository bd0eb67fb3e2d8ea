"""Lab 6 -- share it: send a caching-allocator block to a second OS process and read it back there.

Three exercises, each judged with a real second process (``multiprocessing`` spawn, one
simulated device of its own); the bytes cross through the simulated device's legacy IPC
(``ipc_get_mem_handle`` / ``ipc_open_mem_handle``, a shared segment in ``/dev/shm``):

* ``lab6.share_handle``: ``share_handle(alloc, allocation) -> {"ipc_handle", "offset", "size"}``
  in the sender: the legacy handle of the block's *segment base* plus the block's offset in it, as
  PyTorch's ``'c'`` handle.  The check gives the learner's handle and offset to the reference
  receiver in the other process and compares the bytes it reads with the bytes written into the
  block.  Most cases put the block away from its segment's base.
* ``lab6.read_shared``: ``read_shared(dev, handle) -> bytes``, run *in the other process* (its
  source is sent there, as spawn would import it): open the segment, add the offset, read, close.
  The handle comes from the reference sender.  Judged on the bytes, and on nothing left open
  on the receiver's device.
* ``lab6.lifetime``: ``producer(alloc, data, peer) -> bytes``: allocate, write, share with
  :func:`allocator_ref.sharing.share_block`, let the other process open, read and close it, and
  free the block only after that.  A producer that frees too early is rejected with the receiver's
  own ``SenderFreedError``; one that returns the sender's copy of the bytes (equal in value) instead
  of what the receiver's read returned is rejected by where the bytes came from.

The expected results (the offset, the bytes) are computed at check time by the reference
:func:`allocator_ref.sharing.share_block`; hidden cases draw the layout of the segment (blocks
allocated, and freed, before the shared one), its size and its bytes from the seed.  One receiver
process serves all the cases of one check: started on first use (restarted if it died), stopped
when the check ends (``Exercise.teardown``), so no process outlives a check.
"""
from __future__ import annotations

import atexit
import inspect
import random
import textwrap
import traceback
from dataclasses import replace
from typing import Any, Optional

from ..editions.messages import translator
from .. import sharing
# The harness's internals lab 6's checker runs its own child on, and the share registry it cleans up
# after a learner's code: each from the file of sharing/ that owns it.
from ..sharing.handles import _SHARES
from ..sharing.harness import _Peer, _leaks, _raise_remote, _reply
from ..sharing.tokens import _remove_token
from .reference import CachingAllocator
from .check import Case, Exercise, Fail, KiB, MiB, fmt, lab_device, observed, register

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)

RUN_TIMEOUT_S = 60


# ------------------------------------------------------------------ the second process

def _child_main(conn: Any) -> None:
    """The receiver process: the reference receiver commands plus running a learner's function."""
    import signal
    from ..device.sim import SimDevice
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # a notebook interrupt is for the kernel; we end on EOF
    dev = SimDevice("h100-80gb")
    blocks: dict = {}
    while True:
        try:
            cmd, *args = conn.recv()
        except (EOFError, OSError):
            return
        if dev._closed:                       # a learner's function closed it: start a fresh one
            dev = SimDevice("h100-80gb")
        if cmd == "run":
            source, name, handle = args
            _reply(conn, lambda: _run_learner(dev, source, name, handle))
        elif cmd == "open":
            handle = sharing.recv_shared(conn)

            def do_open(handle=handle):
                b = sharing.open_block(dev, handle)
                blocks[id(b)] = b
                return id(b), b.ptr
            _reply(conn, do_open)
        elif cmd == "read":
            _reply(conn, lambda: blocks[args[0]].read(args[1], args[2]))
        elif cmd == "close":
            _reply(conn, lambda: blocks.pop(args[0]).close())
        elif cmd == "leaks":
            _reply(conn, lambda: _leaks(dev))
        elif cmd == "ping":                   # the parent's handshake: this process started and listens
            _reply(conn, lambda: "pong")
        elif cmd == "exit":
            for b in blocks.values():
                try:
                    b.close()
                except Exception:
                    pass
            conn.send(("ok", None))
            return


class LearnerError(RuntimeError):
    pass


def _run_learner(dev: Any, source: str, name: str, handle: dict) -> tuple:
    """Define the learner's function here, call it; (result, imports it left open).  Cleans up after it."""
    namespace = {"__name__": "lab6_receiver"}
    before = set(dev._import_ptrs)
    try:
        exec(compile(source, "<your receiver>", "exec"), namespace)
        result = namespace[name](dev, dict(handle))
    except BaseException as exc:          # report it with the line in the learner's source
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<your receiver>"]
        where = ""
        if frames:
            line = source.splitlines()[frames[-1].lineno - 1].strip()
            where = tr(" (line {lineno} of your function: {line})",
                       lineno=frames[-1].lineno, line=line)
        raise LearnerError(f"{type(exc).__name__}: {exc}{where}") from None
    finally:
        left = [p for p in dev._import_ptrs if p not in before]
        for p in left:                        # close what it left open, so the next case starts clean
            while p in dev._import_ptrs:
                dev.ipc_close_mem_handle(p)
    if isinstance(result, (bytes, bytearray, memoryview)):
        result = bytes(result)
    else:
        result = f"<{type(result).__name__}>"
    return result, len(left)


class LabPeer(sharing.RemoteReceiver):
    """The reference receiver (open/read/close_block/leaks) that can also run a learner's function."""

    def __init__(self) -> None:
        _Peer.__init__(self, _child_main)
        self._handshake()

    def _handshake(self) -> None:
        """Wait until the receiver answers.  Spawn starts it by importing the learner's main module: a
        script with no ``if __name__ == "__main__":`` guard runs its check() calls again there, and the
        new process dies while starting.  Say that, instead of a crash the learner's code did not cause."""
        try:
            self.conn.send(("ping",))
            answered = self.conn.poll(RUN_TIMEOUT_S)
            alive = answered and _raise_remote(self.conn.recv()) == "pong"
        except (EOFError, OSError):
            alive = False
        if not alive:
            self.process.kill()
            raise Fail(tr("the receiver process stopped before it answered. Run from a script, the check starts "
                          "it by importing your script again: put your check() calls under "
                          "`if __name__ == \"__main__\":` (a notebook needs no guard)"),
                       tr("the receiver process could not start"))

    def run(self, source: str, name: str, handle: dict) -> tuple:
        self.conn.send(("run", source, name, dict(handle)))
        if not self.conn.poll(RUN_TIMEOUT_S):
            self.process.kill()
            raise Fail(tr("your receiver did not return within {run_timeout_s} s (in the other process)",
                          run_timeout_s=RUN_TIMEOUT_S),
                       tr("your receiver did not return in time"))
        return _raise_remote(self.conn.recv())


_PEER: Optional[LabPeer] = None


def peer() -> LabPeer:
    """The receiver process of the running check (started on first use, restarted if it died)."""
    global _PEER
    import multiprocessing
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # This process is a receiver being started: spawn imports the learner's main module first, and a
        # script without a __main__ guard runs its check() calls again here.  multiprocessing's own
        # bootstrap check (_check_not_importing_main) reads the same flag.
        raise Fail(tr("this report comes from the receiver process, which imports your script again to start; it "
                      "says nothing about your function, and the check in your own process reports below"),
                   tr("check() ran again inside the receiver process"),
                   hint=tr("put your check() calls under `if __name__ == \"__main__\":` (a notebook needs no guard)"))
    if _PEER is None or not _PEER.process.is_alive():
        if _PEER is not None:
            _close_peer()
        _PEER = LabPeer()
    return _PEER


def _close_peer() -> None:
    global _PEER
    if _PEER is not None:
        try:
            _PEER.close()
        except Exception:
            _PEER.process.kill()
        _PEER = None


atexit.register(_close_peer)


# ------------------------------------------------------------------ the sender's side, made by the check

class RecordingAllocator(CachingAllocator):
    """The reference allocator; records frees in a shared event list (the lifetime check reads it)."""

    def __init__(self, device, events: list) -> None:
        super().__init__(device)
        self.events = events

    def free(self, allocation):
        self.events.append(("free", getattr(allocation, "ptr", allocation)))
        return super().free(allocation)


def _layout(profile: str, pads: list, size: int, data_seed: int, events: Optional[list] = None):
    """A fresh device and allocator; blocks allocated (and some freed) before the one to share."""
    dev = lab_device(profile)
    alloc = RecordingAllocator(dev, events if events is not None else [])
    held = []
    for n, keep in pads:
        a = alloc.malloc(n)
        if keep:
            held.append(a)
        else:
            alloc.free(a)
    alloc.events.clear()
    data = random.Random(data_seed).randbytes(size)
    return dev, alloc, held, data


def _describe_layout(pads: list, size: int, profile: str) -> str:
    parts = [fmt(n) if keep else tr("{size} (freed)", size=fmt(n)) for n, keep in pads]
    if not parts:
        return tr("{size} block after nothing on {profile}", size=fmt(size), profile=profile)
    return tr("{size} block after {blocks} on {profile}", size=fmt(size), blocks=tr(", ").join(parts),
              profile=profile)


def _remote_error(exc: Exception) -> str:
    return f"{getattr(exc, 'remote_type', type(exc).__name__)}: {exc}"


# ------------------------------------------------------------------ lab6.share_handle

def _named_base(dev, ipc: bytes):
    """The base of the allocation of ``dev`` that a legacy handle names (None: none of its exports)."""
    import struct
    from ..device.sim.ipc import _HANDLE_FMT
    try:
        _magic, pid, seq, token, _size = struct.unpack_from(_HANDLE_FMT, ipc)
    except struct.error:
        return None
    return next((base for base, seg in getattr(dev, "_exports", {}).items()
                 if getattr(seg, "ids", None) == (pid, seq, token)), None)


def run_share_handle(fn, profile: str, pads: list, size: int, data_seed: int) -> dict:
    """The runner (check.observed): the learner's share_handle on a fresh device, then the receiver
    process opens what it returned and reads the block there.  The account: which allocation the
    handle names, the offset, and a digest of the bytes the receiver read (or why it could not)."""
    import hashlib
    dev, alloc, held, data = _layout(profile, pads, size, data_seed)
    what = _describe_layout(pads, size, profile)
    a = alloc.malloc(size)
    dev.write(a.ptr, data)
    dev.synchronize()
    share = None
    try:
        h = fn(alloc, a)
        if not isinstance(h, dict) or not {"ipc_handle", "offset", "size"} <= set(h):
            raise Fail(tr("share_handle returned {h_type}; return a dict with the keys 'ipc_handle', 'offset' "
                          "and 'size'",
                          h_type=type(h).__name__),
                       tr("share_handle did not return the handle dict"))
        ipc, offset, nbytes = h["ipc_handle"], h["offset"], h["size"]
        if not isinstance(ipc, (bytes, bytearray)) or len(ipc) != 64:
            raise Fail(tr("h['ipc_handle'] must be the 64 bytes dev.ipc_get_mem_handle(base) returns"),
                       tr("the ipc_handle is not the 64 bytes of a legacy IPC handle"))
        if not isinstance(offset, int) or not isinstance(nbytes, int):
            raise Fail(tr("h['offset'] and h['size'] must be ints"),
                       tr("offset and size must be ints"))
        ipc, offset, nbytes = bytes(ipc), int(offset), int(nbytes)
        if not a.requested_size <= nbytes <= a.size:
            raise Fail(tr("h['size'] is {nbytes}: share the allocation's bytes ({a_requested_size} asked for, "
                          "{a_size} in its block)",
                          nbytes=nbytes, a_requested_size=a.requested_size, a_size=a.size),
                       tr("the size in the handle is not the allocation's"))
        if a.freed or alloc.live_allocations() != sorted(held + [a], key=lambda x: x.ptr):
            raise Fail(tr("share_handle changed the allocator (freed or allocated blocks): it only describes the "
                          "block"),
                       tr("share_handle allocated or freed blocks"))
        seen = {"named_base": _named_base(dev, ipc), "offset": offset, "what": what, "pid": None,
                "open_error": None, "read_error": None, "read": None}
        share = sharing.share_block(alloc, a, "legacy")      # what carries the learner's handle over there
        p = peer()
        seen["pid"] = p.pid
        try:
            ref_id = p.open(replace(share, ipc_handle=ipc, offset=offset))
        except sharing.SharingError as exc:
            seen["open_error"] = _remote_error(exc)
            return seen
        try:
            seen["read"] = hashlib.sha256(p.read(ref_id, 0, a.requested_size)).hexdigest()
        except sharing.SharingError as exc:
            seen["read_error"] = _remote_error(exc)
        finally:
            try:
                p.close_block(ref_id)
            except sharing.SharingError:
                pass
        return seen
    finally:
        if not a.freed:
            alloc.free(a)
        if share is not None:
            _remove_token(share.token)
        dev.close()


def _expected_share(profile: str, pads: list, size: int, data_seed: int) -> tuple:
    """(block pointer, segment base, offset, segment size, digest of the bytes) by the reference share_block."""
    import hashlib
    dev, alloc, held, data = _layout(profile, pads, size, data_seed)
    a = alloc.malloc(size)
    ref = sharing.share_block(alloc, a, "legacy")
    try:
        return a.ptr, a.ptr - ref.offset, ref.offset, ref.segment_size, hashlib.sha256(data).hexdigest()
    finally:
        alloc.free(a)
        _remove_token(ref.token)
        dev.close()


def judge_share_handle(fn, profile: str, pads: list, size: int, data_seed: int) -> None:
    seen = observed(fn, run_share_handle, profile, pads, size, data_seed)
    what = seen["what"]
    # The expected segment and offset: computed after the learner's code ran (in a graded check, in
    # another process than it).
    ptr, base, ref_offset, segment_size, digest = _expected_share(profile, pads, size, data_seed)
    if seen["named_base"] != base:
        raise Fail(tr("your handle names another allocation than the segment that holds the block ({what}): the "
                      "block at {ptr:#x} lies in the {segment_size} segment based at {base:#x}; find the segment "
                      "whose [address, address + total_size) holds the block's pointer (not simply the first "
                      "one) and get the handle of its base",
                      what=what, ptr=ptr, segment_size=fmt(segment_size), base=base),
                   tr("your handle does not name the block's segment"))
    if seen["open_error"] is not None:
        raise Fail(tr("the receiver (process {seen_pid}) could not open your handle ({what}): {seen_open_error}",
                      seen_pid=seen['pid'], what=what, seen_open_error=seen['open_error']),
                   tr("the receiver could not open your handle"))
    if seen["read_error"] is not None:
        raise Fail(tr("the receiver (process {seen_pid}) could not read {size} at your offset {seen_offset} "
                      "({what}): {seen_read_error}",
                      seen_pid=seen['pid'], size=fmt(size), seen_offset=seen['offset'], what=what,
                      seen_read_error=seen['read_error']),
                   tr("the receiver could not read the block at your offset"))
    if seen["read"] != digest:
        raise Fail(tr("the receiver read other bytes than the block's ({what}): your offset is {seen_offset}, "
                      "the block is {ref_offset} bytes ({offset_bytes}) into its {segment_size} segment. The "
                      "handle names the whole segment: add the block's offset from its base.",
                      what=what, seen_offset=seen['offset'], ref_offset=ref_offset, offset_bytes=fmt(ref_offset),
                      segment_size=fmt(segment_size)),
                   tr("the receiver read other bytes than the block's: wrong offset from the segment base"))


# ------------------------------------------------------------------ lab6.read_shared

def _source_of(fn) -> tuple:
    if not inspect.isfunction(fn) or fn.__name__ == "<lambda>":
        raise Fail(tr("check() needs your receiver function itself (a def, not a lambda)"),
                   tr("check() needs your receiver function itself"))
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise Fail(tr("the source of your function cannot be read (define it with def in a cell or a file)"),
                   tr("the source of your function cannot be read")) from None
    return source, fn.__name__


def source_of(fn) -> list:
    """The runner (check.observed): the receiver's source and name, read where the submission lives.
    The function itself runs only in the receiver process, started by the judge."""
    return list(_source_of(fn))


def judge_read_shared(fn, profile: str, pads: list, size: int, data_seed: int) -> None:
    source, name = observed(fn, source_of)
    dev, alloc, held, data = _layout(profile, pads, size, data_seed)
    what = _describe_layout(pads, size, profile)
    a = alloc.malloc(size)
    dev.write(a.ptr, data)
    dev.synchronize()
    ref = sharing.share_block(alloc, a, "legacy")
    handle = {"ipc_handle": ref.ipc_handle, "offset": ref.offset, "size": a.requested_size}
    p = peer()
    try:
        try:
            got, left_open = p.run(source, name, handle)
        except sharing.SharingError as exc:
            text = str(exc).replace("in the other process: LearnerError: ", "")
            if text.startswith("NotImplementedError"):
                raise NotImplementedError(text) from None     # the stub: "not written yet"
            hint = (tr(" Your function runs in another process: names defined in your notebook are not there; "
                       "import what you need inside the function.") if "NameError" in text else "")
            raise Fail(tr("your receiver raised in the other process (pid {p_pid}; {what}): {text}.{hint}",
                          p_pid=p.pid, what=what, text=text, hint=hint),
                       tr("your receiver raised an error in the other process") + (" (NameError)" if hint else "")) \
                from None
        if type(got) is not bytes:
            raise Fail(tr("your receiver returned {got}; return the bytes it read (dev.read(...))",
                          got=got),
                       tr("your receiver did not return bytes"))
        if got != data:
            n = min(len(got), len(data))
            i = next((k for k in range(n) if got[k] != data[k]), n)
            raise Fail(tr("your receiver returned {got} bytes that differ from the block's {data} from byte {i} "
                          "on ({what}; the block is {ref_offset} bytes into its segment). The handle's "
                          "ipc_handle opens the whole segment: the block starts at base + offset.",
                          got=len(got), data=len(data), i=i, what=what, ref_offset=ref.offset),
                       tr("the bytes your receiver read differ from the block's (offset from the segment base?)"))
        if left_open:
            raise Fail(tr("correct bytes, but your receiver left {left_open} IPC mapping(s) open on its device "
                          "(no dev.ipc_close_mem_handle(base) after the read): every open needs a close, with "
                          "the pointer ipc_open_mem_handle returned",
                          left_open=left_open),
                       tr("your receiver did not close the handle"))
    finally:
        alloc.free(a)
        _remove_token(ref.token)
        dev.close()


# ------------------------------------------------------------------ lab6.lifetime

class Consumer:
    """What the learner's producer talks to: the receiver process, recording what happens."""

    def __init__(self, receiver: LabPeer, events: list) -> None:
        self._peer, self.events = receiver, events
        self.pid = receiver.pid
        self.tokens: list = []

    def open(self, handle: Any) -> int:
        """The receiver opens the shared block; returns a reference for read/close."""
        if hasattr(handle, "token"):
            self.tokens.append(handle.token)
        ref = self._peer.open(handle)
        self.events.append(("open", ref))
        return ref

    def read(self, ref: int, offset: int = 0, nbytes: Optional[int] = None) -> bytes:
        """The receiver reads the block's bytes (over there) and sends them back."""
        got = self._peer.read(ref, offset, nbytes)
        self.events.append(("read", ref, offset, got))
        return got

    def close(self, ref: int) -> None:
        """The receiver is done: it unmaps the block on its side."""
        self._peer.close_block(ref)
        self.events.append(("close", ref))

    def __repr__(self) -> str:
        return f"<receiver process {self.pid}: open(handle) -> ref, read(ref), close(ref)>"


def _from_the_receiver(got: bytes, reads: list) -> bool:
    """Whether ``got`` is what the receiver's reads returned: one read's own bytes object (what came back
    from the other process), or its reads from offset 0, in order, joined.

    Every case would accept the sender's copy by value: the sender wrote those bytes, so its own
    ``alloc.device.read`` (or ``data`` itself) equals what the receiver read on every seed.  Only where the
    object came from tells them apart, so that is what is checked (``Consumer.read`` records each object)."""
    if any(got is e[3] for e in reads):
        return True
    at, chunks = 0, []
    for _, _, offset, chunk in reads:
        if offset != at:
            return False
        chunks.append(chunk)
        at += len(chunk)
    return len(chunks) > 1 and got == b"".join(chunks)


def judge_lifetime(fn, profile: str, pads: list, size: int, data_seed: int) -> None:
    # No expected value: every check reads what the producer did (the events, the leaks), so the whole
    # judge is the runner, run where the submission lives.
    observed(fn, run_lifetime, profile, pads, size, data_seed)


def run_lifetime(fn, profile: str, pads: list, size: int, data_seed: int) -> None:
    """The runner (check.observed): the learner's producer with a fresh device and the receiver process."""
    events: list = []
    dev, alloc, held, data = _layout(profile, pads, size, data_seed, events)
    what = _describe_layout(pads, size, profile)
    p = peer()
    consumer = Consumer(p, events)
    shares_before = set(_SHARES)
    try:
        try:
            got = fn(alloc, data, consumer)
        except sharing.SharingError as exc:
            kind = getattr(exc, "remote_type", type(exc).__name__)
            if kind == "SenderFreedError":
                raise Fail(tr("the receiver (process {p_pid}) failed ({what}): SenderFreedError: {exc} Free the "
                              "block only after the receiver has closed it.",
                              p_pid=p.pid, what=what, exc=exc),
                           tr("the receiver failed with SenderFreedError: the sender freed the block while the "
                              "receiver still used it")) from None
            raise Fail(tr("the receiver (process {p_pid}) failed ({what}): {kind}: {exc}",
                          p_pid=p.pid, what=what, kind=kind, exc=exc),
                       tr("the receiver failed")) from None
        opened = {e[1] for e in events if e[0] == "open"}
        reads = [e for e in events if e[0] == "read"]
        if not opened or not reads:
            raise Fail(tr("the receiver never opened and read the block: hand it the handle with "
                          "peer.open(handle), then peer.read(ref)"),
                       tr("the receiver never read the block"))
        n = len(data)           # the block is rounded up: a read of the whole block has more bytes
        if type(got) is not bytes or got[:n] != data or not any(e[2] == 0 and e[3][:n] == data for e in reads):
            raise Fail(tr("the receiver did not read the data ({what}): write `data` into the block "
                          "(alloc.device.write(x.ptr, data)) before sharing it, share that block, and return "
                          "what peer.read(ref) gave",
                          what=what),
                       tr("the receiver did not read the data that was written"))
        if not _from_the_receiver(got, reads):
            raise Fail(tr("the bytes your producer returned are not the bytes the receiver read ({what}): they "
                          "have the same value, but they came from the sender (its own device, or `data`), which "
                          "says nothing about what the other process saw; return what peer.read(ref) gave",
                          what=what),
                       tr("it returned the sender's bytes, not the bytes the receiver read"))
        closed = [i for i, e in enumerate(events) if e[0] == "close"]
        frees = [i for i, e in enumerate(events) if e[0] == "free"]
        if opened - {events[i][1] for i in closed}:
            raise Fail(tr("the receiver still has the block open when your producer returns: call "
                          "peer.close(ref) when it is done"),
                       tr("the receiver never closed the block"))
        if not frees:
            raise Fail(tr("leak: the shared block is still allocated when your producer returns ({what}): free "
                          "it once the receiver has closed it",
                          what=what),
                       tr("leak: the shared block was never freed"))
        if frees[-1] < closed[-1]:
            raise Fail(tr("the block was freed before the receiver closed it: the receiver was not done with it "
                          "(it may still read). Free it after peer.close(ref)."),
                       tr("the block was freed before the receiver closed it"))
        leaked = [x for x in alloc.live_allocations() if x not in held]
        if leaked:
            raise Fail(tr("leak: {leaked} allocation(s) besides the ones the check made are still allocated "
                          "({value})",
                          leaked=len(leaked), value=', '.join((fmt(x.requested_size) for x in leaked))),
                       tr("leak: allocations are left when the producer returns"))
        if set(_SHARES) - shares_before:
            raise Fail(tr("a share is still active when your producer returns (share_block without a free of its "
                          "block, or unshare)"),
                       tr("a share is still active at the end"))
        left = p.leaks()
        if left["imports"]:
            raise Fail(tr("the receiver's device still holds {left_imports} IPC mapping(s)",
                          left_imports=left['imports']),
                       tr("the receiver still holds an IPC mapping"))
    finally:
        for ref in {e[1] for e in events if e[0] == "open"} - {e[1] for e in events if e[0] == "close"}:
            try:
                p.close_block(ref)
            except Exception:
                pass
        for token in set(_SHARES) - shares_before:
            sharing.unshare(_SHARES[token].handle)
        for token in consumer.tokens:            # ended shares leave a dead token file until exit
            _remove_token(token)
        dev.close()


# ------------------------------------------------------------------ cases

PUBLIC = [
    # (profile, pads [(bytes, kept?)], size, data seed, label)
    ("h100-80gb", [], 3 * MiB, 1, later("a 3 MiB block at the base of its segment")),
    ("h100-80gb", [(3 * MiB, True)], 5 * MiB, 2, later("a 5 MiB block 3 MiB into a 20 MiB segment")),
    ("h100-80gb", [(1000, True), (5000, True)], 700, 3, later("a 700 B block after two small ones (2 MiB segment)")),
    ("h100-80gb", [(4096, True), (30 * MiB, True)], 2 * MiB, 4, later("a 2 MiB block in the third segment")),
]


def _hidden(rng: random.Random) -> list:
    specs = []
    for k in range(3):
        small = k == 1
        pads = []
        for _ in range(rng.randint(1, 4)):
            n = rng.randint(512, 200 * KiB) if small else rng.randint(1 * MiB + 1, 6 * MiB)
            pads.append((n, rng.random() < 0.7))
        if all(not keep for _, keep in pads):
            pads[0] = (pads[0][0], True)
        size = rng.randint(1, 300 * KiB) if small else rng.randint(1 * MiB + 1, 8 * MiB)
        profile = rng.choice(["h100-80gb", "t4-16gb", "tiny-1gb"])
        label = (tr("a small block") if small else tr("a large block")) + tr(" after seeded allocations and frees")
        specs.append((profile, pads, size, rng.randrange(1 << 30), label))
    # A block in a *later* segment (a small-pool segment comes first): the base is not segments[0].
    pads = [(rng.randint(512, 200 * KiB), True), (rng.randint(21 * MiB, 40 * MiB), rng.random() < 0.5)]
    specs.append((rng.choice(["h100-80gb", "t4-16gb"]), pads, rng.randint(1 * MiB + 1, 8 * MiB),
                  rng.randrange(1 << 30), tr("a large block in a later segment, after seeded allocations")))
    return specs


def _cases(judge, rng=None) -> list:
    specs = PUBLIC if rng is None else _hidden(rng)
    return [Case(s[4], (lambda fn, s=s: judge(fn, *s[:4])), data=s[:4]) for s in specs]


register(Exercise(
    id="lab6.share_handle", observed=True, lab=6, title=later("the sender: a legacy handle of the segment base + "
                                                              "the block's offset"),
    public=lambda: _cases(judge_share_handle), hidden=lambda rng: _cases(judge_share_handle, rng),
    teardown=_close_peer,
    nudge=(later("What exactly does a legacy IPC handle name: a block, or the whole allocation that holds it?"),
           later("Find the segment whose address range holds the allocation, and express where the block lies "
                 "inside it.")),
    hint=later("cudaIpcGetMemHandle only names a whole cudaMalloc allocation, i.e. the block's segment. Find the "
               "segment holding allocation.ptr in alloc.snapshot()['segments'] (its 'address' and 'total_size'), "
               "then return {'ipc_handle': alloc.device.ipc_get_mem_handle(base), 'offset': allocation.ptr - "
               "base, 'size': allocation.requested_size}."),
))

register(Exercise(
    id="lab6.read_shared", observed=True, lab=6, title=later("the receiver, in another process: open the "
                                                             "segment, add the offset, close"),
    public=lambda: _cases(judge_read_shared), hidden=lambda rng: _cases(judge_read_shared, rng),
    teardown=_close_peer,
    nudge=(later("Where does the block start in the mapping open returned, and what must be closed before you "
                 "return?"),
           later("Open maps the sender's whole segment: add the offset from the handle to find the block, and "
                 "close exactly the pointer open gave you.")),
    hint=later("base = dev.ipc_open_mem_handle(handle['ipc_handle']) maps the sender's whole segment here; the "
               "block starts at base + handle['offset']. Read handle['size'] bytes there with dev.read, then "
               "dev.ipc_close_mem_handle(base) (the pointer open returned, not base + offset). The function runs "
               "in another process: import inside it whatever it needs."),
))

register(Exercise(
    id="lab6.lifetime", observed=True, lab=6, title=later("the lifetime rule: keep the block alive until the "
                                                          "receiver is done"),
    public=lambda: _cases(judge_lifetime), hidden=lambda rng: _cases(judge_lifetime, rng),
    teardown=_close_peer,
    nudge=(later("When is the sender allowed to free: after sharing, or after the receiver is done?"),
           later("Order the calls: write, share, the receiver opens, reads and closes; where in that order may "
                 "the free go, and what should the producer return?")),
    hint=later("Allocate a block of len(data) bytes and write data into it; share it with share_block; let the "
               "peer open the handle, read the bytes and close its mapping; only after that free the block, and "
               "return what the peer read. Freeing earlier returns the block to the cache, where the next malloc "
               "may reuse its bytes while the receiver still reads them."),
))


# ------------------------------------------------------------------ the rules' edges and states
# Each is met by the hidden cases of every seed (make check-labs proves it): see spec.edges.
from .spec import Edge, edges  # noqa: E402


def _small(n: int) -> bool:
    return n <= MiB


def _away_from_base(d) -> bool:
    """A block placed after a kept block of its own pool: it does not start at its segment's base."""
    profile, pads, size, _ = d
    return any(keep and _small(n) == _small(size) and (not _small(size) or n < 2 * MiB) for n, keep in pads)


_SHARE_EDGES = (
    Edge("a block away from its segment's base (the offset is not 0)", _away_from_base),
    Edge("a block in a later segment (its base is not the first segment's)",
         lambda d: any(n > 20 * MiB for n, _ in d[1]) and not _small(d[2])),
    Edge("a small-pool block (a 2 MiB segment)", lambda d: _small(d[2])),
    Edge("a size that is not a multiple of 512 (the block is bigger than the request)", lambda d: d[2] % 512 != 0),
)
for _id in ("lab6.share_handle", "lab6.read_shared", "lab6.lifetime"):
    edges(_id, *_SHARE_EDGES)
