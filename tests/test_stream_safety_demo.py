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
