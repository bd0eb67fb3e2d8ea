"""Bad input: a clear error and nothing changed (issue 3 'Bad input').

PyTorch checks a request before it touches the pools (DeviceCachingAllocator::malloc,
NativeCachingAllocator::allocate and free in c10/cuda/CUDACachingAllocator.cpp; test/test_cuda.py's
test_caching_allocator_alloc_negative_size and test_set_per_process_memory_fraction)."""
from __future__ import annotations

import pytest

import allocator_ref as ar
from caching_helpers import MiB, Recorder, assert_consistent, make_alloc  # noqa: F401


def state(a):
    return a.memory_stats(), a.segments()


@pytest.fixture
def busy(make_alloc):
    """An allocator with some history: live and cached blocks in both pools."""
    a = make_alloc(profile="tiny-1gb")
    a.record_memory_history("all")
    live = [a.malloc(n) for n in (4, 3000, 5 * MiB, 12 * MiB + 1)]
    a.free(live.pop(1))
    return a, live


def test_zero_size_is_a_null_allocation(busy):
    a, live = busy
    before = state(a)
    rec = Recorder(a)
    x = a.malloc(0)
    assert x.ptr == 0 and x.size == 0 and not x
    assert state(a)[0] == before[0]
    assert rec.simple() == []
    a.free(x)                                  # freeing the null allocation is a no-op
    a.free(x)
    assert rec.simple() == []
    assert a.memory_stats() == before[0]


@pytest.mark.parametrize("size", [-1, -MiB])
def test_negative_size(busy, size):
    a, _ = busy
    before = state(a)
    with pytest.raises(ValueError, match="Invalid memory size"):
        a.malloc(size)
    assert state(a)[0] == before[0]


@pytest.mark.parametrize("size", [1.5, "1024", None, True, 3.0])
def test_non_int_size(busy, size):
    a, _ = busy
    before = a.memory_stats()
    with pytest.raises((TypeError, ValueError)):
        a.malloc(size)
    assert a.memory_stats() == before


def test_double_free(busy):
    a, live = busy
    x = live.pop()
    a.free(x)
    before = state(a)
    with pytest.raises(ValueError, match=r"(?i)double free|already freed"):
        a.free(x)
    with pytest.raises(ValueError):
        a.free(x.ptr)                          # by pointer, too
    assert state(a)[0] == before[0]


def test_double_free_after_the_address_was_reused(busy):
    a, live = busy
    x = live.pop()
    a.free(x)
    y = a.malloc(x.requested_size)             # same block comes back
    assert y.ptr == x.ptr
    before = a.memory_stats()
    with pytest.raises(ValueError):
        a.free(x)                              # the stale handle must not free y
    assert a.memory_stats() == before
    a.free(y)


def test_free_allocation_of_another_allocator(busy, make_alloc):
    a, live = busy
    b = make_alloc(profile="tiny-1gb")
    y = b.malloc(1000)
    before_a, before_b = state(a), state(b)
    with pytest.raises(ValueError, match="another allocator"):
        a.free(y)
    assert state(a)[0] == before_a[0] and state(b)[0] == before_b[0]
    b.free(y)


@pytest.mark.parametrize("ptr", [12345, 2**40])
def test_free_unknown_pointer(busy, ptr):
    a, live = busy
    before = a.memory_stats()
    with pytest.raises(ValueError):
        a.free(ptr)
    # a pointer inside a live block is not a live allocation either
    with pytest.raises(ValueError):
        a.free(live[0].ptr + 512 if live[0].size > 512 else live[2].ptr + 512)
    assert a.memory_stats() == before


def test_free_wrong_type(busy):
    a, _ = busy
    with pytest.raises(TypeError):
        a.free("0x1000")


def test_record_stream_on_freed_allocation(busy):
    a, live = busy
    x = live.pop()
    a.free(x)
    s = a.device.create_stream()
    before = state(a)
    with pytest.raises(ValueError):
        a.record_stream(x, s)
    assert state(a)[0] == before[0]


def test_stream_of_another_device(busy):
    a, live = busy
    other = ar.SimDevice("tiny-1gb")
    before = a.memory_stats()
    with pytest.raises(ar.CudaError):
        a.malloc(100, stream=other.create_stream())
    with pytest.raises(ar.CudaError):
        a.record_stream(live[0], other.create_stream())
    assert a.memory_stats() == before
    other.close()


BAD_CONFIGS = ["foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
               "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
               "pinned_num_register_threads:none", "pinned_num_register_threads:1024",
               "large_segment_size_mb:10", "roundup_power2_divisions:3", "roundup_power2_divisions:[63:2]",
               "expandable_segments:yes", "backend:foo", "per_process_memory_fraction:2",
               "max_non_split_rounding_mb:1", "pinned_reserve_segment_size_mb:0",
               "max_split_size_mb:abc", "max_split_size_mb:", "max_split_size_mb"]


@pytest.mark.parametrize("text", BAD_CONFIGS)
def test_invalid_config_keys_change_no_memory(busy, text):
    a, live = busy
    before_stats, before_segments = state(a)
    # ValueError for a bad value (TORCH_CHECK_VALUE, std::invalid_argument), RuntimeError
    # for a value missing at the end ("Index out of bounds in ConfigTokenizer", an internal assert)
    with pytest.raises((ValueError, RuntimeError)) as err:
        a.set_allocator_settings(text)
    assert str(err.value)                      # a message, not an empty error
    assert a.memory_stats() == before_stats
    assert a.segments() == before_segments
    # setAllocatorSettings parses in place: last_allocator_settings_ is the rejected string
    assert a.snapshot()["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] == text
    assert_consistent(a)


def test_fraction_errors_change_nothing(busy):
    a, _ = busy
    before = a.memory_stats()
    for bad in (2, -1.0, 1.5, "0.5"):
        with pytest.raises((TypeError, ValueError)):
            a.set_per_process_memory_fraction(bad)
    assert a.get_per_process_memory_fraction() == 1.0
    assert a.memory_stats() == before
