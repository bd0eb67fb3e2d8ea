"""Sharing caching-allocator blocks between two real OS processes (spawn) on the simulated device."""
import os

import pytest

from allocator_ref import CachingAllocator
from allocator_ref import sharing as S
from allocator_ref.sharing import tokens
from allocator_ref.device.sim import SimDevice

MiB = 1 << 20


@pytest.fixture(scope="module")
def peer():
    saved = os.environ.get("ALLOCATOR_REF_DEVICE")
    os.environ.setdefault("ALLOCATOR_REF_DEVICE", "sim")       # the spawned receiver inherits it
    try:
        with S.RemoteReceiver("sim") as p:
            yield p
    finally:                                                    # leave the suite's settings as pinned
        if saved is None:
            os.environ.pop("ALLOCATOR_REF_DEVICE", None)
        else:
            os.environ["ALLOCATOR_REF_DEVICE"] = saved


@pytest.fixture
def dev():
    d = SimDevice("h100-80gb")
    yield d
    d.close()


def _tokens():
    return {f for f in os.listdir(tokens._TOKEN_DIR) if f.startswith(f"allocator_ref_share_{os.getpid()}_")}


@pytest.mark.parametrize("config,kind", [("", "c"), ("expandable_segments:True", "e")])
def test_round_trip_both_ways_and_freed_block_error(peer, dev, config, kind):
    a = CachingAllocator(dev, config)
    pad = a.malloc(3 * MiB)                     # the shared block is not at its segment's base
    x = a.malloc(5 * MiB)
    dev.write(x.ptr, b"written by the sender")
    h = S.share_block(a, x)
    assert h.kind == kind and h.offset == 3 * MiB
    ref = peer.open(h)
    assert peer.read(ref, 0, 21) == b"written by the sender"
    peer.write(ref, b"WRITTEN", 0)
    assert dev.read(x.ptr, 21) == b"WRITTEN by the sender"
    a.free(x)                                   # lifetime rule broken: the block is back in the cache
    with pytest.raises(S.SenderFreedError, match="freed the shared block"):
        peer.read(ref, 0, 4)
    peer.close_block(ref)
    assert peer.leaks() == {"imports": 0, "handles": 0, "reservations": 0, "exports": 0, "shares": 0}
    assert S.active_shares() == 0
    a.free(pad)


def test_legacy_refuses_expandable_block(dev):
    a = CachingAllocator(dev, "expandable_segments:True")
    x = a.malloc(MiB)
    with pytest.raises(S.SharingError, match="expandable_segments:True cannot be shared"):
        S.share_block(a, x, kind="legacy")
    b = CachingAllocator(dev, "")
    y = b.malloc(MiB)
    with pytest.raises(S.SharingError, match="kind='legacy'"):
        S.share_block(b, y, kind="expandable")
    b.free(y)
    with pytest.raises(S.SharingError, match="live allocation"):
        S.share_block(b, y)
    a.free(x)


def test_expandable_handle_without_fds_is_refused(dev):
    a = CachingAllocator(dev, "expandable_segments:True")
    x = a.malloc(MiB)
    h = S.share_block(a, x)
    import dataclasses
    with pytest.raises(S.SharingError, match="recv_shared"):
        S.open_block(dev, dataclasses.replace(h, fds=()))
    S.unshare(h)
    assert S.active_shares() == 0
    a.free(x)


@pytest.mark.parametrize("config", ["", "expandable_segments:True"])
def test_receiver_outlives_sender(dev, config):
    sender = S.RemoteSender(4 * MiB, b"from the sender", config=config, kind="sim")
    h = sender.share()
    blk = S.open_block(dev, h)
    assert blk.read(0, 15) == b"from the sender"
    sender.exit()
    with pytest.raises(S.SenderFreedError, match="has exited"):
        blk.read(0, 4)
    blk.close()
    assert not dev._imports and not dev._handles and not dev._reservations


def test_sender_free_in_other_process(dev):
    sender = S.RemoteSender(4 * MiB, b"abc", config="expandable_segments:True", kind="sim")
    blk = S.open_block(dev, sender.share())
    sender.free()
    with pytest.raises(S.SenderFreedError):
        blk.write(b"x")
    blk.close()
    sender.exit()
    assert not dev._imports and not dev._handles and not dev._reservations


def test_no_token_files_left_after_unshare(dev):
    before = _tokens()
    a = CachingAllocator(dev, "")
    x = a.malloc(MiB)
    h = S.share_block(a, x)
    assert len(_tokens() - before) == 1
    S.unshare(h)
    assert _tokens() == before
    a.free(x)


def test_a_stream_ordered_block_cannot_be_shared(dev):
    # PyTorch's backend:cudaMallocAsync has no IPC (its shareIpcHandle throws, CUDAMallocAsyncAllocator.cpp):
    # a clear error, not an AttributeError.
    from allocator_ref.policies import StreamOrderedAllocator
    a = StreamOrderedAllocator(dev)
    x = a.malloc(MiB)
    with pytest.raises(S.SharingError, match="cudaMallocAsync does not support IPC"):
        S.share_block(a, x)
    a.free(x)
    a.close()
