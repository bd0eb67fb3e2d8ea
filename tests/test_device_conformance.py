"""One conformance suite for the device protocol, run on every available device.

``device`` is the simulated 'tiny-1gb' device and, when a GPU answers, the
real one (those cases carry the ``gpu`` marker).  Where the simulator can be
exact (its virtual clock), the test asserts exact numbers; on a GPU it checks
the same effect with wall-clock margins.
"""
from __future__ import annotations

import pytest

from allocator_ref.device import CudaError, CudaOutOfMemoryError, Device, SimDevice, open_device
from allocator_ref.device.cuda import probe_cuda
from allocator_ref.device.protocol import HostBuffer

MiB = 1 << 20


def test_device_follows_the_protocol(device):
    assert isinstance(device, Device)
    assert device.info.simulated == device.simulated
    assert device.info.vmm_granularity == device.vmm_granularity() == 2 * MiB
    assert device.default_stream.handle == 0
    if device.simulated:
        assert "(simulated)" in device.describe() and "(simulated)" in device.info.name


def test_mem_get_info_sees_the_context_reserve(device):
    free, total = device.mem_get_info()
    assert total == device.info.total_memory
    assert free <= total - device.info.context_reserve
    if device.simulated:
        assert free == total - device.info.context_reserve   # nothing allocated yet


def test_malloc_free_roundtrip_and_alignment(device):
    free0, _ = device.mem_get_info()
    big = device.malloc(6 * MiB)
    small = device.malloc(1000)
    assert big % (2 * MiB) == 0 and small % 512 == 0
    assert not (small < big + 6 * MiB and big < small + 1000)
    free1, _ = device.mem_get_info()
    assert free0 - free1 >= 6 * MiB
    device.free(big)
    device.free(small)
    free2, _ = device.mem_get_info()
    if device.simulated:
        assert free2 == free0
    assert device.counters.malloc_calls >= 2 and device.counters.free_calls >= 2


def test_write_read_fill_copy(device):
    a, b = device.malloc(2 * MiB), device.malloc(2 * MiB)
    device.write(a, b"course")
    assert device.read(a, 6) == b"course"
    device.fill(b, 1 * MiB, 0x5A)
    device.copy(b + 1 * MiB, a, 6)
    device.synchronize()
    assert device.read(b, 4) == b"\x5a" * 4
    assert device.read(b + 1 * MiB, 6) == b"course"
    device.free(a)
    device.free(b)


def test_out_of_memory_then_recovery(device):
    _, total = device.mem_get_info()
    with pytest.raises(CudaOutOfMemoryError) as err:
        device.malloc(total + 2 * MiB)
    assert err.value.name == "cudaErrorMemoryAllocation"
    p = device.malloc(1 * MiB)              # still usable
    device.write(p, b"ok")
    assert device.read(p, 2) == b"ok"
    device.free(p)


def test_filling_the_simulated_device_to_the_brim(sim):
    chunks = []
    with pytest.raises(CudaOutOfMemoryError):
        while True:
            chunks.append(sim.malloc(64 * MiB))
    free, _ = sim.mem_get_info()
    assert 0 <= free < 64 * MiB
    sim.free(chunks.pop())
    chunks.append(sim.malloc(64 * MiB))     # recovery: the freed room is usable again
    for p in chunks:
        sim.free(p)
    assert sim.mem_get_info()[0] == sim.info.total_memory - sim.info.context_reserve


def test_cudafree_waits_for_a_queued_kernel(device):
    s = device.create_stream()
    p = device.malloc(4 * MiB)
    device.synchronize()
    syncs, waited = device.counters.implicit_syncs, device.counters.implicit_sync_wait_us
    t0 = device.now_us()
    device.sleep(s, 2000)
    device.free(p)
    elapsed = device.now_us() - t0
    assert device.counters.implicit_syncs == syncs + 1
    if device.simulated:
        launch = device.costs.kernel_launch_us()
        # the kernel ends at t0 + launch + 2000; cudaFree waits for it, then costs free_us
        assert elapsed == pytest.approx(launch + 2000 + device.costs.free_us(4 * MiB))
        assert device.counters.implicit_sync_wait_us - waited == pytest.approx(2000)
    else:
        assert elapsed >= 1500


def test_cudamalloc_does_not_wait(sim):
    s = sim.create_stream()
    sim.sleep(s, 2000)
    t0 = sim.now_us()
    p = sim.malloc(4 * MiB)
    assert sim.now_us() - t0 == pytest.approx(sim.costs.malloc_us(4 * MiB))
    assert not s.query()
    sim.free(p)


def _cross_stream_demo(device, wait_for_copy: bool) -> tuple[bytes, bool]:
    """Stream B copies src->dst after 1 ms; meanwhile src is freed and reused on stream A."""
    a, b = device.create_stream(), device.create_stream()
    src = device.malloc_async(1 * MiB, a)
    dst = device.malloc(1 * MiB)
    device.fill(src, 1 * MiB, 0x11, a)
    device.synchronize()
    device.sleep(b, 1000)
    device.copy(dst, src, 1 * MiB, b)
    if wait_for_copy:                       # the fix: A waits for B's copy before the free
        done = device.create_event()
        done.record(b)
        device.wait_event(a, done)
    device.free_async(src, a)               # stream-ordered free on A: A is idle, so reusable at once
    reused = device.malloc_async(1 * MiB, a)
    device.fill(reused, 1 * MiB, 0xAA, a)
    device.synchronize()
    data = device.read(dst, 1 * MiB)
    device.free_async(reused, a)
    device.free(dst)
    return data, reused == src


def test_cross_stream_reuse_corrupts_without_an_event(device):
    data, same_address = _cross_stream_demo(device, wait_for_copy=False)
    if not same_address:
        pytest.skip("the pool did not hand back the same address on this GPU")
    assert data == b"\xaa" * MiB             # B's copy ran after A overwrote the buffer


def test_cross_stream_reuse_is_safe_after_an_event_wait(device):
    data, _ = _cross_stream_demo(device, wait_for_copy=True)
    assert data == b"\x11" * MiB


def test_events_and_stream_queries(device):
    s = device.create_stream()
    start, end = device.create_event(), device.create_event()
    start.record(s)
    device.sleep(s, 3000)
    end.record(s)
    assert not end.query() and not s.query()
    end.synchronize()
    assert end.query() and start.query()
    ms = start.elapsed_time_ms(end)
    if device.simulated:
        assert ms == pytest.approx(3.0 + device.costs.kernel_launch_us() / 1000)
    else:
        assert 2.5 <= ms <= 50
    device.sleep(s, 500)
    s.synchronize()
    assert s.query()
    device.destroy_stream(s)
    with pytest.raises(CudaError) as err:
        device.sleep(s, 1)
    assert err.value.name == "cudaErrorInvalidResourceHandle"


def test_malloc_async_pool_reuse_and_release_threshold(device):
    s = device.create_stream()
    device.mempool_set_release_threshold(0)
    device.mempool_trim_to(0)
    p = device.malloc_async(3 * MiB, s)
    assert device.mempool_reserved() >= 3 * MiB
    device.free_async(p, s)
    q = device.malloc_async(3 * MiB, s)        # same stream: reused in stream order
    assert q == p
    device.free_async(q, s)
    device.synchronize()                       # threshold 0: the pool gives its memory back
    assert device.mempool_reserved() == 0
    device.mempool_set_release_threshold(1 << 62)
    r = device.malloc_async(3 * MiB, s)
    device.free_async(r, s)
    device.synchronize()
    assert device.mempool_reserved() >= 3 * MiB   # kept
    device.mempool_trim_to(0)
    assert device.mempool_reserved() == 0
    device.mempool_set_release_threshold(0)
    assert device.counters.malloc_async_calls >= 3 and device.counters.free_async_calls >= 3


def test_pool_counts_hits_and_misses(sim):
    s = sim.create_stream()
    p = sim.malloc_async(1 * MiB, s)
    sim.free_async(p, s)
    t0 = sim.now_us()
    sim.free_async(sim.malloc_async(1 * MiB, s), s)
    assert sim.counters.pool_misses == 1 and sim.counters.pool_hits == 1
    assert sim.now_us() - t0 == pytest.approx(sim.costs.pool_hit_us() + sim.costs.pool_free_us())
    sim.synchronize()
    assert sim.counters.pool_releases == 1


# --- VMM ---------------------------------------------------------------------

def test_vmm_three_steps_and_bytes_belong_to_the_handle(device):
    g = device.vmm_granularity()
    free0 = device.mem_get_info()[0]
    va = device.address_reserve(8 * g)
    assert va % g == 0
    h = device.mem_create(2 * g)
    assert device.mem_get_info()[0] <= free0 - 2 * g
    device.mem_map(va, 2 * g, h)
    device.mem_set_access(va, 2 * g)
    device.mem_map(va + 4 * g, 2 * g, h)        # the same handle at a second address
    device.mem_set_access(va + 4 * g, 2 * g)
    device.write(va + 10, b"shared")
    device.synchronize()
    assert device.read(va + 4 * g + 10, 6) == b"shared"
    device.mem_unmap(va + 4 * g, 2 * g)
    device.mem_unmap(va, 2 * g)
    device.mem_release(h)
    device.address_free(va, 8 * g)
    if device.simulated:
        assert device.mem_get_info()[0] == free0
    assert device.counters.vmm_calls >= 9


def test_vmm_release_of_a_mapped_handle_is_deferred_until_unmap(device):
    g = device.vmm_granularity()
    va = device.address_reserve(2 * g)
    h = device.mem_create(2 * g)
    device.mem_map(va, 2 * g, h)
    device.mem_set_access(va, 2 * g)
    device.write(va, b"alive")
    device.mem_release(h)                       # allowed while mapped (cuMemRelease docs)
    assert device.read(va, 5) == b"alive"       # the memory is still there
    if device.simulated:
        assert device.vmm_physical_bytes() == 2 * g
    device.mem_unmap(va, 2 * g)                 # ...and goes with the last mapping
    if device.simulated:
        assert device.vmm_physical_bytes() == 0
    device.address_free(va, 2 * g)


def _vmm_error(call) -> str:
    with pytest.raises(CudaError) as err:
        call()
    return err.value.name


def test_vmm_misuse_raises_the_modelled_errors(device):
    g = device.vmm_granularity()
    va = device.address_reserve(4 * g)
    h = device.mem_create(2 * g)
    unreserved = va + 64 * g if device.simulated else 0x10000
    assert _vmm_error(lambda: device.mem_map(unreserved, 2 * g, h)) == "CUDA_ERROR_INVALID_VALUE"   # map before reserve
    assert _vmm_error(lambda: device.mem_unmap(va, 2 * g)) in ("CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_NOT_MAPPED")
    assert _vmm_error(lambda: device.mem_map(va + 1, 2 * g, h)) == "CUDA_ERROR_INVALID_VALUE"       # unaligned
    device.mem_map(va, 2 * g, h)
    assert _vmm_error(lambda: device.mem_map(va, 2 * g, h)) in ("CUDA_ERROR_ALREADY_MAPPED", "CUDA_ERROR_INVALID_VALUE")
    if device.simulated:                        # on a GPU this would be a fatal kernel fault
        assert _vmm_error(lambda: device.fill(va, 16, 1)) == "CUDA_ERROR_ILLEGAL_ADDRESS"   # access before set-access
        assert _vmm_error(lambda: device.read(va + 2 * g, 16)) == "CUDA_ERROR_ILLEGAL_ADDRESS"  # reserved, unmapped
    device.mem_set_access(va, 2 * g)
    device.fill(va, 16, 1)
    assert device.read(va, 2) == b"\x01\x01"
    device.mem_unmap(va, 2 * g)
    device.mem_release(h)
    device.address_free(va, 4 * g)


def test_vmm_out_of_memory(sim):
    g = sim.vmm_granularity()
    free = sim.mem_get_info()[0]
    with pytest.raises(CudaOutOfMemoryError) as err:
        sim.mem_create((free // g + 1) * g)
    assert err.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    h = sim.mem_create(g)                       # still usable
    sim.mem_release(h)


# --- pinned host memory -------------------------------------------------------

def test_pinned_zero_copy(device):
    buf = device.host_alloc(1 * MiB, mapped=True)
    assert isinstance(buf, HostBuffer) and buf.device_ptr is not None and not buf.registered
    device.fill(buf.device_ptr, 4096, 0x7E)
    device.synchronize()
    assert bytes(buf.host[:4]) == b"\x7e" * 4          # the kernel wrote host memory, no copy
    buf.host[100:103] = b"cpu"
    assert device.read(buf.device_ptr + 100, 3) == b"cpu"
    device.host_free(buf)

    user = bytearray(64 * 1024)
    reg = device.host_register(user)
    assert reg.registered and reg.device_ptr is not None
    device.write(reg.device_ptr + 8, b"pinned")
    device.synchronize()
    assert bytes(user[8:14]) == b"pinned"
    device.host_unregister(reg)


def test_pinned_unmapped_has_no_device_pointer(sim):
    buf = sim.host_alloc(4096, mapped=False)
    assert buf.device_ptr is None
    t = sim.now_us()
    sim.host_free(buf)
    assert sim.now_us() > t


# --- simulated-only hooks -----------------------------------------------------

def test_address_hint_and_stream_handles(sim):
    asked = []

    def hint(kind, size):
        asked.append((kind, size))
        return 0x7F1234000000 if kind == "malloc" else None

    sim.set_address_hint(hint)
    p = sim.malloc(4 * MiB)
    assert p == 0x7F1234000000 and asked == [("malloc", 4 * MiB)]
    with pytest.raises(CudaError, match="overlaps"):
        sim.malloc(4 * MiB)                      # same address again: overlaps the live range
    va = sim.address_reserve(2 * MiB)           # None: normal placement
    assert va != p
    sim.set_address_hint(None)
    q = sim.malloc(4 * MiB)
    assert q != p
    s = sim.create_stream(handle=0x55D0C8A3B2F0)
    assert s.handle == 0x55D0C8A3B2F0 and sim.stream_by_handle(0x55D0C8A3B2F0) is s
    other = sim.create_stream()
    assert other.handle not in (0, s.handle)
    with pytest.raises(CudaError, match="already in use"):
        sim.create_stream(handle=0x55D0C8A3B2F0)


def test_open_device_says_what_it_picked(capsys, monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("ALLOCATOR_REF_PROFILE", "t4-16gb")
    dev = open_device()
    line = capsys.readouterr().out.strip()
    assert isinstance(dev, SimDevice) and dev.profile.name == "t4-16gb"
    assert line.count("\n") == 0 and "SimDevice 't4-16gb'" in line and "simulated" in line


def test_open_device_auto_falls_back_with_a_reason(capsys, monkeypatch):
    monkeypatch.delenv("ALLOCATOR_REF_DEVICE", raising=False)
    dev = open_device(profile="tiny-1gb")
    line = capsys.readouterr().out.strip()
    if probe_cuda()[0]:
        assert "CudaDevice" in line
    else:
        assert isinstance(dev, SimDevice) and "simulated:" in line and probe_cuda()[1] in line
    dev.close()


def test_forcing_cuda_without_a_gpu_says_use_sim(monkeypatch):
    if probe_cuda()[0]:
        pytest.skip("a GPU is present")
    with pytest.raises(CudaError) as err:
        open_device("cuda")
    assert err.value.name in ("cudaErrorNoDevice", "cudaErrorInsufficientDriver")
    assert "ALLOCATOR_REF_DEVICE=sim" in str(err.value)


def test_vmm_shareable_fd_export_import(device):
    g = device.vmm_granularity()
    h = device.mem_create(g)
    fd = device.mem_export_fd(h)
    imported = device.mem_import_fd(fd)
    va = device.address_reserve(2 * g)
    device.mem_map(va, g, h)
    device.mem_map(va + g, g, imported)
    device.mem_set_access(va, 2 * g)
    device.write(va, b"one physical page")
    device.synchronize()
    assert device.read(va + g, 17) == b"one physical page"   # both names, same memory
    device.mem_unmap(va, 2 * g)
    device.mem_release(imported)
    device.mem_release(h)
    device.address_free(va, 2 * g)
    import os
    os.close(fd)


def test_every_simulated_number_cites_a_source():
    from allocator_ref.device import CostModel, load_profile, profile_names
    assert {"h100-80gb", "h200-141gb", "t4-16gb", "tiny-1gb"} <= set(profile_names())
    for name in profile_names():
        prof = load_profile(name)
        assert prof.vmm_granularity == 2 * MiB
        assert all(len(src) > 20 for src in prof.sources.values()), name
    costs = CostModel()
    for key, entry in costs.raw.items():
        if not key.startswith("_"):
            assert len(entry["source"]) > 20 and entry["basis"], key
    assert costs.malloc_us(1 << 30) > costs.malloc_us(2 * MiB) > 0      # costs grow with size
    assert costs.free_syncs_device and not costs.malloc_syncs_device
