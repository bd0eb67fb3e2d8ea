"""The course's stream-safety lesson, on the caching allocator, judged by the bytes read back.

Stream B reads a buffer with a long kernel queued behind a busy one.  The host frees the
buffer and immediately allocates the same size on stream A and overwrites it:

* without ``record_stream`` the caching allocator hands A the very same block (it only
  knows the block's owning stream, A), A's write runs while B is still waiting, and the
  bytes B copies out are A's: corrupted;
* with ``record_stream(buffer, B)`` the free waits for an event recorded on B, so A gets a
  different block until B has finished, and B's copy is intact.

The same code runs on the simulated device (real bytes, virtual clock) and on a GPU.
"""
import pytest

from allocator_ref.caching import CachingAllocator

N = 1 << 20
ORIGINAL, OVERWRITE = 0x11, 0xAA


def _run(device, use_record_stream: bool):
    allocator = CachingAllocator(device)
    a = device.default_stream
    b = device.create_stream()
    buf = allocator.malloc(N, a)
    out = allocator.malloc(N, b)
    device.fill(buf.ptr, N, ORIGINAL, a)
    ready = device.create_event()
    ready.record(a)
    device.wait_event(b, ready)           # B sees the original bytes ...
    device.sleep(b, 20_000)               # ... but is busy for 20 ms first
    device.copy(out.ptr, buf.ptr, N, b)   # then reads the buffer
    if use_record_stream:
        allocator.record_stream(buf, b)
    old_ptr = buf.ptr
    allocator.free(buf)
    reused = allocator.malloc(N, a)
    device.fill(reused.ptr, N, OVERWRITE, a)   # A is idle: this runs at once
    got = device.read(out.ptr, N, b)
    device.synchronize()
    return old_ptr, reused.ptr, got


def test_without_record_stream_the_reader_sees_corrupted_bytes(device):
    old_ptr, new_ptr, got = _run(device, use_record_stream=False)
    assert new_ptr == old_ptr                 # the allocator reused the block at once
    assert got == bytes([OVERWRITE]) * N      # B copied A's bytes, not the original ones


def test_with_record_stream_the_allocator_waits_and_the_bytes_are_intact(device):
    old_ptr, new_ptr, got = _run(device, use_record_stream=True)
    assert new_ptr != old_ptr                 # the block was held back for B's event
    assert got == bytes([ORIGINAL]) * N


def test_a_destroyed_using_stream_neither_leaks_nor_corrupts(sim):
    from allocator_ref.caching import check_stats_consistency
    from allocator_ref.device.errors import CudaError
    allocator = CachingAllocator(sim)
    side = sim.create_stream()
    x = allocator.malloc(N)
    sim.sleep(side, 5_000)
    allocator.record_stream(x, side)
    sim.destroy_stream(side)
    allocator.free(x)                      # waits for the destroyed stream's work, then frees
    assert sim.now_us() >= 5_000
    check_stats_consistency(allocator.segments(), allocator.memory_stats())
    assert allocator.memory_stats()["active_bytes.all.current"] == 0
    y = allocator.malloc(N)
    with pytest.raises(CudaError, match="destroyed"):
        allocator.record_stream(y, side)   # clear error, nothing changed
    check_stats_consistency(allocator.segments(), allocator.memory_stats())
    allocator.free(y)
    with pytest.raises(ValueError, match="already freed"):
        allocator.record_stream(y, sim.default_stream)
