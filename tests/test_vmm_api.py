"""The VMM teaching API (allocator_ref.vmm): the three steps, misuse errors, the growable buffer."""
import pytest

from allocator_ref import vmm
from allocator_ref.device.errors import CudaError
from allocator_ref.device.sim import SimDevice

MiB = 1 << 20


@pytest.fixture
def dev():
    d = SimDevice("h100-80gb")
    yield d
    d.close()


def _clean(d):
    return not d._reservations and not d._handles and d.vmm_physical_bytes() == 0


def test_three_steps_round_trip(dev):
    g = vmm.granularity(dev)
    assert g == 2 * MiB and vmm.round_up(dev, 1) == g
    ptr = vmm.reserve_range(dev, 4 * g)
    h = vmm.create_physical(dev, g)
    vmm.map_and_grant(dev, ptr + g, g, h)
    dev.write(ptr + g, b"abc")
    assert dev.read(ptr + g, 3) == b"abc"
    vmm.unmap(dev, ptr + g, g)
    vmm.release(dev, h)
    vmm.free_range(dev, ptr, 4 * g)
    assert _clean(dev)


def _code(excinfo):
    return excinfo.value.args[0] if excinfo.value.args else str(excinfo.value)


def test_map_outside_reservation(dev):
    ptr = vmm.reserve_range(dev, 2 * MiB)
    h = vmm.create_physical(dev, 2 * MiB)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE.*reserve before you map"):
        vmm.map_and_grant(dev, ptr + 2 * MiB, 2 * MiB, h)
    vmm.release(dev, h); vmm.free_range(dev, ptr, 2 * MiB)
    assert _clean(dev)


def test_access_before_set_access(dev):
    ptr = vmm.reserve_range(dev, 2 * MiB)
    h = vmm.create_physical(dev, 2 * MiB)
    dev.mem_map(ptr, 2 * MiB, h)                      # mapped, no cuMemSetAccess yet
    with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        dev.read(ptr, 4)
    dev.mem_set_access(ptr, 2 * MiB)
    assert dev.read(ptr, 4) == b"\0" * 4
    vmm.unmap(dev, ptr, 2 * MiB); vmm.release(dev, h); vmm.free_range(dev, ptr, 2 * MiB)
    assert _clean(dev)


def test_unmap_of_unmapped_range(dev):
    ptr = vmm.reserve_range(dev, 4 * MiB)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE.*nothing is mapped"):
        vmm.unmap(dev, ptr, 2 * MiB)
    vmm.free_range(dev, ptr, 4 * MiB)
    assert _clean(dev)


def test_release_of_mapped_handle_is_deferred_then_invalid(dev):
    """cuMemRelease of a mapped handle: the id dies now, the memory at the last unmap (CUDA docs)."""
    ptr = vmm.reserve_range(dev, 2 * MiB)
    h = vmm.create_physical(dev, 2 * MiB)
    vmm.map_and_grant(dev, ptr, 2 * MiB, h)
    vmm.release(dev, h)
    assert dev.vmm_physical_bytes() == 2 * MiB            # still counted while mapped
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_HANDLE"):
        vmm.release(dev, h)                               # a second release: not a live handle
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE.*still has mappings"):
        vmm.free_range(dev, ptr, 2 * MiB)                 # cannot free a range with mappings
    vmm.unmap(dev, ptr, 2 * MiB)
    vmm.free_range(dev, ptr, 2 * MiB)
    assert _clean(dev)


def test_growable_buffer_grows_in_place_and_keeps_bytes(dev):
    with vmm.GrowableBuffer(dev, 64 * MiB) as buf:
        start = buf.ptr
        buf.append(b"a" * (3 * MiB))
        assert len(buf.handles) == 2 and buf.mapped == 4 * MiB
        kernels = dev.counters.kernels
        buf.append(b"b" * (3 * MiB))
        assert dev.counters.kernels - kernels <= 1      # the write only: no copy of old bytes
        assert buf.ptr == start and len(buf.handles) == 3
        assert buf.read(0, 2) == b"aa" and buf.read(6 * MiB - 2, 2) == b"bb"
        buf.resize(1)
        buf.shrink_to_fit()
        assert len(buf.handles) == 1 and buf.read(0, 1) == b"a"
        states = buf.history
        assert states[0].mapped == 0 and max(s.mapped for s in states) == 6 * MiB
        assert "<svg" in states[-1].to_svg()
        with pytest.raises(ValueError, match="virtual reservation"):
            buf.reserve(65 * MiB)
    assert buf.closed and _clean(dev)
    buf.close()                                           # idempotent


def test_growable_buffer_oom_leaves_it_unchanged():
    d = SimDevice("tiny-1gb")
    free, _ = d.mem_get_info()
    buf = vmm.GrowableBuffer(d, 4 << 30)
    buf.resize(8 * MiB)
    with pytest.raises(CudaError):
        buf.reserve(free + 64 * MiB)
    assert len(buf.handles) == 4 and d.vmm_physical_bytes() == 8 * MiB
    buf.close()
    assert _clean(d)
    d.close()


def test_growable_buffer_bad_arguments(dev):
    with pytest.raises(ValueError):
        vmm.GrowableBuffer(dev, 0)
    with pytest.raises(ValueError):
        vmm.GrowableBuffer(dev, 8 * MiB, page_size=3 * MiB)
    assert _clean(dev)
