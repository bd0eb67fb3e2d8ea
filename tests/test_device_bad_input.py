"""Bad input: every mistake gets a clear error that names the problem,
and the device is left exactly as it was."""
from __future__ import annotations

import pytest

from allocator_ref.device import CudaError, SimDevice, load_profile, open_device

MiB = 1 << 20


def state(dev):
    """What a failed call must not change."""
    free, total = dev.mem_get_info()
    snapshot = [free, total, dev.mempool_reserved()]
    if dev.simulated:
        snapshot += [dev._space.live_ranges(), sorted(dev._allocs), dev.vmm_physical_bytes()]
    return snapshot


def expect_error(dev, call, name, *words):
    """``call()`` raises CudaError ``name`` whose text contains ``words``; state unchanged."""
    before = state(dev)
    with pytest.raises(CudaError) as err:
        call()
    assert err.value.name == name, str(err.value)
    for word in words:
        assert word in str(err.value), f"{word!r} not in: {err.value}"
    assert state(dev) == before
    return err.value


@pytest.mark.parametrize("size, words", [
    (0, ["positive", "0"]), (-5, ["positive", "-5"]), (2**61, ["absurd"]),
    (1.5, ["int", "1.5"]), ("64", ["int", "'64'"]), (True, ["int", "True"]), (None, ["int", "None"]),
])
def test_bad_sizes(device, size, words):
    for call in (lambda: device.malloc(size), lambda: device.malloc_async(size)):
        expect_error(device, call, "cudaErrorInvalidValue", *words)
    expect_error(device, lambda: device.mem_create(size), "CUDA_ERROR_INVALID_VALUE", *words)
    expect_error(device, lambda: device.host_alloc(size), "cudaErrorInvalidValue", *words)


def test_bad_frees(device):
    p = device.malloc(4 * MiB)
    device.free(p)
    expect_error(device, lambda: device.free(p), "cudaErrorInvalidDevicePointer", "double free", hex(p))
    expect_error(device, lambda: device.free_async(p), "cudaErrorInvalidDevicePointer", "double free")
    expect_error(device, lambda: device.free(0xDEAD0000), "cudaErrorInvalidDevicePointer", "never allocated")
    q = device.malloc(4 * MiB)
    expect_error(device, lambda: device.free(q + 512), "cudaErrorInvalidValue", "inside the allocation", hex(q))
    expect_error(device, lambda: device.free("q"), "cudaErrorInvalidDevicePointer", "'q'")
    device.free(q)
    device.free(0)                       # cudaFree(NULL) is a no-op


def test_streams_and_events_of_another_device(device):
    other = SimDevice("tiny-1gb")
    foreign_stream, foreign_event = other.create_stream(), other.create_event()
    p = device.malloc(1 * MiB)
    for call in (lambda: device.fill(p, 16, 1, foreign_stream),
                 lambda: device.malloc_async(1 * MiB, foreign_stream),
                 lambda: device.wait_event(None, foreign_event),
                 lambda: device.destroy_stream(foreign_stream),
                 lambda: device.create_event().record(foreign_stream)):
        expect_error(device, call, "cudaErrorInvalidResourceHandle", "not a")
    device.free(p)
    other.close()


def test_destroyed_stream(device):
    s = device.create_stream()
    device.destroy_stream(s)
    expect_error(device, lambda: device.sleep(s, 10), "cudaErrorInvalidResourceHandle", "destroyed")
    expect_error(device, lambda: s.synchronize(), "cudaErrorInvalidResourceHandle", "destroyed")
    expect_error(device, lambda: device.destroy_stream(device.default_stream),
                 "cudaErrorInvalidResourceHandle", "default stream")


def test_bad_kernel_arguments(device):
    p = device.malloc(1 * MiB)
    expect_error(device, lambda: device.fill(p, 16, 256), "cudaErrorInvalidValue", "0..255", "256")
    expect_error(device, lambda: device.read(p, -1), "cudaErrorInvalidValue", "-1")
    expect_error(device, lambda: device.write(p, 12345), "cudaErrorInvalidValue", "bytes-like", "int")
    expect_error(device, lambda: device.sleep(None, -3), "cudaErrorInvalidValue", "-3")
    device.free(p)


def test_kernels_on_freed_memory_are_illegal_addresses(sim):
    p = sim.malloc(1 * MiB)
    sim.free(p)
    expect_error(sim, lambda: sim.fill(p, 16, 1), "CUDA_ERROR_ILLEGAL_ADDRESS", hex(p), "not mapped")
    expect_error(sim, lambda: sim.read(p, 16), "CUDA_ERROR_ILLEGAL_ADDRESS")


def test_bad_vmm_calls(sim):
    g = sim.vmm_granularity()
    expect_error(sim, lambda: sim.mem_create(g + 4096), "CUDA_ERROR_INVALID_VALUE", "granularity")
    expect_error(sim, lambda: sim.address_reserve(g, alignment=3 * g), "CUDA_ERROR_INVALID_VALUE", "alignment")
    expect_error(sim, lambda: sim.mem_release(0x999), "CUDA_ERROR_INVALID_HANDLE", "2457")
    h = sim.mem_create(g)
    va = sim.address_reserve(2 * g)
    expect_error(sim, lambda: sim.mem_map(va, 2 * g, h), "CUDA_ERROR_INVALID_VALUE", "past the end")
    expect_error(sim, lambda: sim.mem_set_access(va, g), "CUDA_ERROR_INVALID_VALUE", "nothing is mapped")
    expect_error(sim, lambda: sim.address_free(va, g), "CUDA_ERROR_INVALID_VALUE", "exactly this size")
    sim.mem_map(va, g, h)
    expect_error(sim, lambda: sim.address_free(va, 2 * g), "CUDA_ERROR_INVALID_VALUE", "still has mappings")
    sim.mem_unmap(va, g)
    sim.mem_release(h)
    expect_error(sim, lambda: sim.mem_release(h), "CUDA_ERROR_INVALID_HANDLE", "already released")
    sim.address_free(va, 2 * g)


def test_bad_address_hint_changes_nothing(sim):
    p = sim.malloc(4 * MiB)
    sim.set_address_hint(lambda kind, size: p + 2 * MiB)
    expect_error(sim, lambda: sim.malloc(4 * MiB), "cudaErrorInvalidValue", "overlaps", hex(p))
    expect_error(sim, lambda: sim.malloc_async(4 * MiB), "cudaErrorInvalidValue", "overlaps")
    sim.set_address_hint(None)
    with pytest.raises(CudaError, match="callable"):
        sim.set_address_hint(42)


def test_bad_stream_handles(sim):
    for bad in (-1, 0, "7", 2.0):
        expect_error(sim, lambda: sim.create_stream(handle=bad), "cudaErrorInvalidValue", "handle")


def test_bad_pinned_and_ipc_arguments(sim):
    expect_error(sim, lambda: sim.host_register(b"immutable"), "cudaErrorInvalidValue", "bytearray", "bytes")
    buf = sim.host_alloc(4096)
    sim.host_free(buf)
    expect_error(sim, lambda: sim.host_free(buf), "cudaErrorInvalidValue", "not a live HostBuffer")
    expect_error(sim, lambda: sim.ipc_open_mem_handle(b"short"), "cudaErrorInvalidValue", "64 bytes")
    expect_error(sim, lambda: sim.ipc_open_mem_handle(b"x" * 64), "cudaErrorInvalidValue", "not a handle")
    p = sim.malloc(4 * MiB)
    expect_error(sim, lambda: sim.ipc_get_mem_handle(p + 512), "cudaErrorInvalidValue", "inside the allocation")
    q = sim.malloc_async(1 * MiB)
    expect_error(sim, lambda: sim.ipc_get_mem_handle(q), "cudaErrorInvalidValue", "pool memory")
    expect_error(sim, lambda: sim.free_async(p), "cudaErrorInvalidValue", "use free")
    expect_error(sim, lambda: sim.ipc_close_mem_handle(p), "cudaErrorInvalidValue", "ipc_open_mem_handle")


def test_closed_device(sim):
    sim.close()
    with pytest.raises(CudaError, match="closed"):
        sim.malloc(1)


def test_unknown_profile_and_malformed_device_kind(monkeypatch):
    with pytest.raises(ValueError) as err:
        SimDevice("h100-8gb")
    assert "'h100-8gb'" in str(err.value) and "h100-80gb" in str(err.value) and "tiny-1gb" in str(err.value)
    with pytest.raises(ValueError, match="t4-16gb"):
        load_profile("T4")
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "gpu")
    with pytest.raises(ValueError) as err:
        open_device()
    assert "ALLOCATOR_REF_DEVICE='gpu'" in str(err.value) and "auto, sim, cuda" in str(err.value)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("ALLOCATOR_REF_PROFILE", "a100")
    with pytest.raises(ValueError, match="'a100'"):
        open_device()
    with pytest.raises(ValueError, match="'simulated'"):
        open_device(kind="simulated")
