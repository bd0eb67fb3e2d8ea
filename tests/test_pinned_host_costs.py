"""Pinned host memory (chapter 1): cudaFreeHost waits for the device as cudaFree does, and pinning
costs grow with the size (moved from the expert review's grab bag, issue 22).
"""
from __future__ import annotations

from allocator_ref.device import SimDevice

MiB = 1024**2


# ------------------------------------------------------- pinned host memory (chapter 1)

def test_cuda_free_host_waits_for_the_device_like_cuda_free():
    """CachingHostAllocator.h: the pinned cache exists to avoid "device synchronizations due to
    cudaFreeHost calls"; the simulated cudaFreeHost drains queued work first."""
    dev = SimDevice("h100-80gb")
    side = dev.create_stream()
    buf = dev.host_alloc(MiB)
    dev.sleep(side, 5000)                                   # 5 ms of unrelated work
    t0, syncs = dev.now_us(), dev.counters.implicit_syncs
    dev.host_free(buf)
    assert dev.counters.implicit_syncs == syncs + 1
    assert dev.now_us() - t0 >= 4000                        # most of the 5 ms was waited out
    dev.close()


def test_pinning_costs_grow_with_size():
    dev = SimDevice("h100-80gb")
    costs = []
    for n in (MiB, 64 * MiB):
        t0 = dev.now_us()
        buf = dev.host_alloc(n)
        costs.append(dev.now_us() - t0)
        dev.host_free(buf)
    assert costs[1] > 5 * costs[0]                          # 64x the bytes: many times the cost
    dev.close()
