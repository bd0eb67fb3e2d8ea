"""A bad argument leaves nothing behind, and bad options are refused when the allocator is built.

Each misuse is tried on a live object; afterwards the device must hold exactly what it
held before (no page mapped, no reservation, no byte of VMM memory).
"""
import pytest

from allocator_ref import vmm
from allocator_ref.device import SimDevice
from allocator_ref.policies import BFCAllocator, StreamOrderedAllocator

MiB = 2**20


@pytest.fixture
def dev():
    d = SimDevice("tiny-1gb")
    yield d
    d.close()


BAD_APPENDS = ["text is not bytes", 5, None, 3.5, [1, 2], object()]


@pytest.mark.parametrize("data", BAD_APPENDS, ids=lambda d: type(d).__name__)
def test_bad_append_maps_nothing(dev, data):
    with vmm.GrowableBuffer(dev, 64 * MiB) as buf:
        buf.append(b"x" * MiB)
        before = (list(buf.handles), buf.size, dev.vmm_physical_bytes(), dev.mem_get_info())
        with pytest.raises(TypeError, match="bytes-like"):
            buf.append(data)
        assert (list(buf.handles), buf.size, dev.vmm_physical_bytes(), dev.mem_get_info()) == before


@pytest.mark.parametrize("call", [
    lambda b: b.reserve(-1), lambda b: b.reserve(1.5), lambda b: b.reserve("4096"),
    lambda b: b.reserve(True), lambda b: b.resize(-3), lambda b: b.resize(None),
    lambda b: b.read(-1, 2), lambda b: b.read(0, 2.0), lambda b: b.read("0"),
])
def test_bad_counts_are_refused_before_any_page(dev, call):
    with vmm.GrowableBuffer(dev, 64 * MiB) as buf:
        buf.append(b"y" * 10)
        before = (list(buf.handles), buf.size, dev.vmm_physical_bytes())
        with pytest.raises(ValueError):
            call(buf)
        assert (list(buf.handles), buf.size, dev.vmm_physical_bytes()) == before


def test_a_failed_write_gives_back_the_pages_it_mapped(dev, monkeypatch):
    with vmm.GrowableBuffer(dev, 64 * MiB) as buf:
        buf.append(b"z" * MiB)
        before = (list(buf.handles), buf.size, dev.vmm_physical_bytes())

        def broken_write(ptr, data):
            raise RuntimeError("the copy failed")
        monkeypatch.setattr(dev, "write", broken_write)
        with pytest.raises(RuntimeError, match="copy failed"):
            buf.append(b"w" * (5 * MiB))         # needs two more pages
        assert (list(buf.handles), buf.size, dev.vmm_physical_bytes()) == before


def test_bad_page_size_is_refused_before_reserving(dev):
    free = dev.mem_get_info()
    with pytest.raises(ValueError, match="page_size"):
        vmm.GrowableBuffer(dev, 8 * MiB, page_size=2.0 * MiB)
    assert dev.mem_get_info() == free


@pytest.mark.parametrize("value", [2**70, 2 * 2**30, 0, -5, 1.5, True, "-4"])
def test_chunk_bytes_is_checked_at_construction(dev, value):
    with pytest.raises(ValueError, match="chunk_bytes"):
        StreamOrderedAllocator(dev, chunk_bytes=value)


@pytest.mark.parametrize("value", [2**70, 2**61, -1, 1.5, True])
def test_bfc_memory_limit_is_checked_at_construction(dev, value):
    with pytest.raises(ValueError, match="memory_limit"):
        BFCAllocator(dev, memory_limit=value)


def test_large_but_sane_options_still_work(dev):
    a = BFCAllocator(dev, memory_limit=4 * 2**30, allow_growth=False)   # backs off to fit
    assert a.malloc(MiB).ptr
    a.close()
    b = StreamOrderedAllocator(dev, chunk_bytes=dev.mem_get_info()[1])   # falls back to the request
    assert b.malloc(MiB).ptr
    b.close()
