"""Never hand out memory twice, leak nothing: settings changed mid-run, destroyed streams, OOMs.

Random workloads on the 1 GiB simulated device, with the allocator settings changed
while memory is in use (``set_allocator_settings``), streams destroyed while blocks
still belong to them, and expandable segments running out of memory.  After every
step:

* allocated <= reserved, and memory_stats() equals what the snapshot adds up to
  (test_cuda_multigpu.py ``_check_memory_stat_consistency``, restated in
  caching_helpers.check_segments);
* no two live allocations overlap;
* every live allocation still reads back the bytes written into it;
* ``oversize_allocations`` / ``oversize_segments`` are never negative.

And the regression tests behind them, each citing the PyTorch 2.11 code it follows
(``c10/cuda/CUDACachingAllocator.cpp``).
"""
from __future__ import annotations

import random

import pytest

import allocator_ref as ar
from allocator_ref import SplitSegmentReleaseError
from caching_helpers import MiB, check_segments, make_alloc  # noqa: F401

PROFILE = "tiny-1gb"


# ---------------------------------------------------------------------------- the checker
class Workload:
    """An allocator plus what its user wrote: ptr -> (allocation, pattern)."""

    def __init__(self, a):
        self.a = a
        self.free_at_start = a.device.mem_get_info()[0]
        self.live = {}
        self.counter = 0

    def malloc(self, nbytes, stream=None):
        x = self.a.malloc(nbytes, stream)
        if x.ptr:
            self.counter += 1
            pattern = self.counter.to_bytes(8, "little") * 2
            n = min(len(pattern), x.requested_size)
            # mark both ends: a whole segment given back would lose them
            self.a.device.write(x.ptr, pattern[:n])
            self.a.device.write(x.ptr + x.requested_size - n, pattern[:n])
            self.a.device.synchronize()
            self.live[x.ptr] = (x, pattern[:n])
        return x

    def free(self, x):
        self.a.free(x)
        self.live.pop(x.ptr, None)

    def check(self):
        a = self.a
        stats = a.memory_stats()
        check_segments(a.segments(record=False), stats)
        for pool in ("all", "small_pool", "large_pool"):
            assert stats[f"allocated_bytes.{pool}.current"] <= stats[f"reserved_bytes.{pool}.current"]
        for name in ("oversize_allocations", "oversize_segments"):
            assert stats[f"{name}.current"] >= 0, f"{name} went negative"
        spans = sorted((x.ptr, x.ptr + x.size) for x, _ in self.live.values())
        for (s0, e0), (s1, _) in zip(spans, spans[1:]):
            assert e0 <= s1, f"live allocations overlap at {s1:#x}"
        for x, pattern in self.live.values():
            n = len(pattern)
            assert a.device.read(x.ptr, n) == pattern, f"allocation at {x.ptr:#x} lost its contents"
            assert a.device.read(x.ptr + x.requested_size - n, n) == pattern


SETTINGS = [
    "", "max_split_size_mb:20", "max_split_size_mb:40", "max_split_size_mb:100",
    "expandable_segments:True", "expandable_segments:False",
    "max_split_size_mb:40,expandable_segments:True", "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.5,max_split_size_mb:60",
    "max_non_split_rounding_mb:64,max_split_size_mb:30",
]
SIZES = [512, 4096, 700_000, 1 * MiB + 1, 3 * MiB, 12 * MiB, 45 * MiB, 90 * MiB, 220 * MiB]


def run_workload(seed: int, steps: int, start: str) -> Workload:
    rng = random.Random(seed)
    dev = ar.SimDevice(PROFILE)
    a = ar.CachingAllocator(dev, start)
    if rng.random() < 0.5:
        a.set_per_process_memory_fraction(0.8)
    w = Workload(a)
    streams = [dev.default_stream, dev.create_stream(), dev.create_stream()]
    hazards = 0
    for _ in range(steps):
        op = rng.choices(["malloc", "free", "record", "empty", "settings", "destroy"],
                         weights=[10, 7, 2, 1, 2, 1])[0]
        try:
            if op == "malloc":
                w.malloc(rng.choice(SIZES) + rng.randrange(0, 4096), rng.choice(streams))
            elif op == "free" and w.live:
                w.free(w.live[rng.choice(sorted(w.live))][0])
            elif op == "record" and w.live:
                a.record_stream(w.live[rng.choice(sorted(w.live))][0], rng.choice(streams))
            elif op == "empty":
                a.empty_cache()
            elif op == "settings":
                a.set_allocator_settings(rng.choice(SETTINGS))
            elif op == "destroy" and len(streams) > 1:
                victim = streams.pop(rng.randrange(1, len(streams)))
                dev.destroy_stream(victim)
                streams.append(dev.create_stream())
        except ar.OutOfMemoryError:
            pass
        except SplitSegmentReleaseError:
            hazards += 1           # PyTorch would have freed (or failed to free) part of a segment
        w.check()
    w.hazards = hazards
    return w


def close_and_check_nothing_leaked(w: Workload) -> None:
    a, dev = w.a, w.a.device
    a.close()
    assert a.memory_reserved() == 0
    assert dev.mem_get_info()[0] == w.free_at_start, "device memory was not all returned"
    assert not a.device_allocator.expandable_segments_, "an expandable reservation outlived close()"
    dev.close()


@pytest.mark.parametrize("seed", [0, 1, 2, 13, 27, 36])
def test_settings_changed_mid_run(seed):
    w = run_workload(seed, steps=250, start="")
    close_and_check_nothing_leaked(w)


def test_the_fuzz_reaches_the_split_segment_release():
    # seed 27 lowers max_split_size while segments are split and then runs short of memory:
    # five times PyTorch's release_available_cached_blocks picks a piece of a segment
    w = run_workload(27, steps=250, start="")
    assert w.hazards >= 1
    close_and_check_nothing_leaked(w)


@pytest.mark.parametrize("seed", range(4))
def test_expandable_with_ooms_and_destroyed_streams(seed):
    w = run_workload(100 + seed, steps=250, start="expandable_segments:True")
    assert w.a.device_allocator.stats.num_ooms > 0 or seed % 2, "the workload should reach the device's limit"
    close_and_check_nothing_leaked(w)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_long_mid_run_workloads(seed):
    w = run_workload(1000 + seed, steps=1500, start=random.Random(seed).choice(SETTINGS))
    close_and_check_nothing_leaked(w)


# ------------------------------------------------------------ max_split_size lowered mid-run
def split_then_lower_threshold(make_alloc, live_first: bool):
    """A 100 MiB segment split into two 50 MiB blocks, one freed, then max_split_size_mb:40."""
    a = make_alloc(profile=PROFILE)
    w = Workload(a)
    x = w.malloc(100 * MiB)
    w.free(x)                                   # one whole cached segment
    y1, y2 = w.malloc(50 * MiB), w.malloc(50 * MiB)  # should_split: 50 < SIZE_MAX, 50 MiB > 1 MiB left
    assert y2.ptr == y1.ptr + 50 * MiB
    w.free(y2 if live_first else y1)
    a.set_allocator_settings("max_split_size_mb:40")
    return a, w


@pytest.mark.parametrize("free_piece_first", [True, False], ids=["piece-at-base", "piece-inside"])
def test_lowered_max_split_never_frees_a_live_block(make_alloc, free_piece_first):
    # release_available_cached_blocks reads max_split_size at every call and hands its pick to
    # release_block, which cudaFrees block->ptr without checking is_split().  The free 50 MiB
    # piece is now "oversize": PyTorch would free it as if it were a segment.
    a, w = split_then_lower_threshold(make_alloc, live_first=not free_piece_first)
    before = a.memory_stats()
    free_before = a.device.mem_get_info()[0]
    with pytest.raises(SplitSegmentReleaseError) as err:
        a.malloc(950 * MiB)                    # more than the device has left: the ladder runs
    text = str(err.value)
    assert "release_available_cached_blocks" in text and "max_split_size" in text
    if free_piece_first:
        assert "whole segment" in text and "1 allocation(s) in it are still live" in text
    else:
        assert "cudaErrorInvalidValue" in text
    # nothing was freed: the device, the stats and the user's data are as before
    assert a.device.mem_get_info()[0] == free_before
    after = a.memory_stats()
    for key in ("reserved_bytes.all.current", "allocated_bytes.all.current", "segment.all.current",
                "num_device_free"):
        assert after[key] == before[key], key
    w.check()
    for x, _ in list(w.live.values()):
        w.free(x)
    a.empty_cache()
    assert a.memory_reserved() == 0


def test_oversize_stats_never_negative_when_threshold_changes(make_alloc):
    a = make_alloc(profile=PROFILE)
    x = a.malloc(50 * MiB)                     # not oversize: max_split_size is unlimited
    a.set_allocator_settings("max_split_size_mb:40")
    a.free(x)                                  # PyTorch: 50 MiB >= 40 MiB -> decrease -> -1
    a.empty_cache()                            # release_block: oversize_segments -> -1 in PyTorch
    st = a.memory_stats()
    assert st["oversize_allocations.current"] == 0 and st["oversize_segments.current"] == 0
    y = a.malloc(50 * MiB)                     # oversize now: counted
    st = a.memory_stats()
    assert st["oversize_allocations.current"] == 1 and st["oversize_segments.current"] == 1
    a.set_allocator_settings("max_split_size_mb:100")
    a.free(y)                                  # PyTorch: 50 < 100 -> never decreased, stays 1
    a.empty_cache()
    st = a.memory_stats()
    assert st["oversize_allocations.current"] == 0 and st["oversize_segments.current"] == 0
    assert st["oversize_allocations.freed"] == 1 and st["oversize_segments.freed"] == 1


# --------------------------------------------------------------------------- destroyed streams
def test_malloc_refuses_a_destroyed_stream_like_the_policies(make_alloc):
    a = make_alloc(profile=PROFILE)
    s = a.device.create_stream()
    a.device.destroy_stream(s)
    before = a.memory_stats()
    with pytest.raises(ar.CudaError, match="cudaErrorInvalidResourceHandle") as err:
        a.malloc(MiB, s)
    assert f"malloc: stream {s.handle:#x} was destroyed (cudaStreamDestroy)" in str(err.value)
    assert a.memory_stats() == before
    # the same class and words as a policy allocator (device/errors.py destroyed_stream_error)
    d = ar.DirectAllocator(a.device)
    with pytest.raises(ar.CudaError) as policy_err:
        d.malloc(MiB, s)
    assert str(policy_err.value) == str(err.value)


def test_expandable_destroyed_stream_empty_cache_and_close_give_everything_back(make_alloc):
    a = make_alloc("expandable_segments:True", profile=PROFILE)
    dev = a.device
    free0 = dev.mem_get_info()[0]
    s = dev.create_stream()
    x = a.malloc(80 * MiB, s)
    dev.fill(x.ptr, x.size, 7, stream=s)       # work still queued on s when it is destroyed
    a.free(x)
    dev.destroy_stream(s)
    a.empty_cache()                            # unmapHandles waits for the device instead of s
    assert a.memory_reserved() == 0
    a.empty_cache()
    a.close()
    assert dev.mem_get_info()[0] == free0
    assert not a.device_allocator.expandable_segments_


# ------------------------------------------------------------------- failed expandable mallocs
def test_failed_expandable_malloc_releases_its_reservations(make_alloc):
    a = make_alloc("expandable_segments:True", profile=PROFILE)
    dev = a.device
    total = dev.info.total_memory
    free0 = dev.mem_get_info()[0]
    small = a.malloc(4096)                     # one small-pool segment, kept
    reservations = len(dev._reservations)
    for _ in range(50):
        with pytest.raises(ar.OutOfMemoryError):
            a.malloc(total + total // 4)       # more than the 1.125x reservation can ever hold
        assert len(dev._reservations) == reservations, "a failed malloc kept a VMM reservation"
    # the address space is intact: an ordinary request still works
    y = a.malloc(4096)
    a.free(y)
    a.free(small)
    a.close()
    assert not dev._reservations
    assert dev.mem_get_info()[0] == free0
