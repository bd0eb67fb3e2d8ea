"""The sharing module's refusals a learner reads speak the reader's language (the ``doctor`` catalogue),
like the rest of the package; chapter 6 prints two of them."""
import pytest

from allocator_ref import CachingAllocator
from allocator_ref import sharing as S
from allocator_ref.device.sim import SimDevice

MiB = 1 << 20


@pytest.fixture
def dev():
    d = SimDevice("h100-80gb")
    yield d
    d.close()


@pytest.mark.parametrize("lang, words", [("en", "cannot be shared between processes with a legacy"),
                                         ("zh", "不能通过旧式 cudaIpcMemHandle 在进程间共享")])
def test_the_legacy_refusal_of_an_expandable_block_is_in_the_readers_language(dev, monkeypatch, lang, words):
    monkeypatch.setenv("ALLOCATOR_REF_LANG", lang)
    a = CachingAllocator(dev, "expandable_segments:True")
    y = a.malloc(5 * MiB)
    with pytest.raises(S.SharingError) as err:
        S.share_block(a, y, kind="legacy")
    assert words in str(err.value)
    assert S.active_shares() == 0                     # the refusal shared nothing
    a.free(y)


@pytest.mark.parametrize("lang, words", [("en", "freed the shared block"), ("zh", "已释放共享块")])
def test_a_block_freed_by_its_sender_is_refused_in_the_readers_language(dev, monkeypatch, lang, words):
    monkeypatch.setenv("ALLOCATOR_REF_LANG", lang)
    a = CachingAllocator(dev)
    x = a.malloc(5 * MiB)
    h = S.share_block(a, x)
    receiver = SimDevice("h100-80gb")                 # another device: a device cannot open its own export
    blk = S.open_block(receiver, h)
    a.free(x)                                         # the sender broke the rule
    with pytest.raises(S.SenderFreedError) as err:
        blk.read(0, 4)
    assert words in str(err.value) and str(h.sender_pid) in str(err.value)
    blk.close()
    receiver.close()


@pytest.mark.parametrize("lang, words", [("en", "shares CachingAllocator blocks only"),
                                         ("zh", "只共享 CachingAllocator 的块")])
def test_a_block_of_another_allocator_is_refused_in_the_readers_language(dev, monkeypatch, lang, words):
    from allocator_ref.policies import StreamOrderedAllocator
    monkeypatch.setenv("ALLOCATOR_REF_LANG", lang)
    pool = StreamOrderedAllocator(dev)
    x = pool.malloc(MiB)
    with pytest.raises(S.SharingError) as err:
        S.share_block(pool, x)
    assert words in str(err.value) and "StreamOrderedAllocator" in str(err.value)
    pool.free(x)
    pool.close()
