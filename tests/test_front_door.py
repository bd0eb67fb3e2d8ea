"""One front door: every registered design refuses each misuse with the same exception type and
words, and is unchanged and still usable afterwards (allocator_ref/front_door.py).

The types are PyTorch's: a freed, foreign or unknown pointer is ``invalid device pointer``
(a RuntimeError from TORCH_CHECK in NativeCachingAllocator::free), a bad stream handle is
``cudaErrorInvalidResourceHandle`` (a CudaError, RuntimeError), a non-int size a TypeError, a
negative one a ValueError."""
from __future__ import annotations

import pytest

from allocator_ref.caching import OutOfMemoryError
from allocator_ref.device import SimDevice
from allocator_ref.device.errors import CudaError
from allocator_ref.front_door import ForeignStreamError, InvalidPointerError
from allocator_ref.policies.registry import make_allocator, policy_names

MiB = 1 << 20


class World:
    """An allocator of one design with some history: live blocks, one freed, a side stream."""

    def __init__(self, policy: str) -> None:
        self.dev = SimDevice("h100-80gb")
        self.other_dev = SimDevice("tiny-1gb")
        self.a = make_allocator(self.dev, policy, "")
        self.a.record_memory_history(enabled="all")
        self.side = self.dev.create_stream()
        self.live = [self.a.malloc(n) for n in (4096, 3 * MiB, 25 * MiB)]
        self.freed = self.a.malloc(MiB)
        self.a.free(self.freed)
        self.other = make_allocator(self.dev, policy, "")     # the same design, another object
        self.theirs = self.other.malloc(MiB)
        gone = self.dev.create_stream()
        self.dev.destroy_stream(gone)
        self.gone = gone

    def state(self):
        a = self.a
        return (a.memory_stats(), [(x.ptr, x.size) for x in a.live_allocations()],
                len(a.trace.entries), a.memory_reserved())

    def close(self) -> None:
        self.other.free(self.theirs)
        self.other_dev.close()
        self.dev.close()


# misuse -> (what the caller does, the exception type every design raises, words in its message)
MISUSES = {
    "negative size": (lambda w: w.a.malloc(-1), ValueError, "Invalid memory size"),
    "float size": (lambda w: w.a.malloc(1.5), TypeError, "Invalid memory size"),
    "str size": (lambda w: w.a.malloc("1024"), TypeError, "Invalid memory size"),
    "None size": (lambda w: w.a.malloc(None), TypeError, "Invalid memory size"),
    "bool size": (lambda w: w.a.malloc(True), TypeError, "Invalid memory size"),
    "stream of another device (malloc)": (
        lambda w: w.a.malloc(4096, w.other_dev.create_stream()), ForeignStreamError, "another device"),
    "stream of another device (record_stream)": (
        lambda w: w.a.record_stream(w.live[0], w.other_dev.create_stream()), ForeignStreamError,
        "another device"),
    "destroyed stream (malloc)": (lambda w: w.a.malloc(4096, w.gone), CudaError, "destroyed"),
    "destroyed stream (record_stream)": (lambda w: w.a.record_stream(w.live[0], w.gone), CudaError,
                                         "destroyed"),
    "double free": (lambda w: w.a.free(w.freed), InvalidPointerError, "double free"),
    "double free by bare int pointer": (lambda w: w.a.free(w.freed.ptr), InvalidPointerError,
                                        "invalid device pointer"),
    "unknown bare int pointer": (lambda w: w.a.free(12345), InvalidPointerError, "invalid device pointer"),
    "pointer inside a live block": (lambda w: w.a.free(w.live[1].ptr + 512), InvalidPointerError,
                                    "invalid device pointer"),
    "another allocator's allocation": (lambda w: w.a.free(w.theirs), InvalidPointerError,
                                       "another allocator"),
    "another allocator's bare pointer": (lambda w: w.a.free(w.theirs.ptr), InvalidPointerError,
                                         "invalid device pointer"),
    "record_stream on a freed block": (lambda w: w.a.record_stream(w.freed, w.side), InvalidPointerError,
                                       "already freed"),
    "record_stream on another allocator's": (lambda w: w.a.record_stream(w.theirs, w.side),
                                             InvalidPointerError, "another allocator"),
    "free of something not a pointer": (lambda w: w.a.free("0x1000"), TypeError, "expected an Allocation"),
    "free of a float": (lambda w: w.a.free(4096.0), TypeError, "expected an Allocation"),
}


@pytest.mark.parametrize("misuse", list(MISUSES))
@pytest.mark.parametrize("policy", policy_names())
def test_each_misuse_is_one_type_and_changes_nothing(policy, misuse):
    do, expected, words = MISUSES[misuse]
    w = World(policy)
    try:
        before = w.state()
        with pytest.raises(Exception) as info:
            do(w)
        # The same type whatever the design (not a subclass one design adds, nor a sibling).
        assert type(info.value) is expected, f"{policy}: {type(info.value).__name__}: {info.value}"
        message = str(info.value)
        assert words in message and "\n" not in message, message
        assert w.state() == before, f"{policy} changed its state on {misuse}"
        # Still consistent and usable: a later malloc/free works, everything comes back.
        y = w.a.malloc(2 * MiB, w.side)
        w.a.free(y)
        for x in w.live:
            w.a.free(x)
        w.dev.synchronize()
        w.a.empty_cache()
        assert w.a.memory_allocated() == 0 and w.a.live_allocations() == []
        stats = w.a.memory_stats()
        assert stats.get("allocation.all.current", 0) == 0, stats
    finally:
        w.close()


def test_the_types_are_pytorchs():
    # free/record_stream of a pointer not held: TORCH_CHECK -> c10::Error -> RuntimeError; kept a
    # ValueError too (what the course's allocators raised before one front door).
    assert issubclass(InvalidPointerError, RuntimeError) and issubclass(InvalidPointerError, ValueError)
    # a stream handle CUDA refuses: cudaErrorInvalidResourceHandle, raised as a RuntimeError
    assert issubclass(ForeignStreamError, CudaError) and issubclass(CudaError, RuntimeError)
    assert ForeignStreamError("malloc", object()).name == "cudaErrorInvalidResourceHandle"


@pytest.mark.parametrize("policy", policy_names())
def test_a_bare_int_pointer_is_a_pointer_everywhere(policy):
    # torch.cuda.caching_allocator_delete(mem_ptr) takes the int: so does every design here.
    dev = SimDevice("h100-80gb")
    try:
        a = make_allocator(dev, policy, "")
        side = dev.create_stream()
        x, y = a.malloc(3 * MiB), a.malloc(MiB)
        a.record_stream(x.ptr, side)          # by pointer too
        a.free(x.ptr)
        assert x.freed and a.live_allocations() == [y]
        a.free(0)                             # free(nullptr) is a no-op, as in PyTorch
        a.free(a.malloc(0))
        a.free(y.ptr)
        dev.synchronize()
        a.empty_cache()
        assert a.memory_allocated() == 0 and a.live_allocations() == []
    finally:
        dev.close()


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize("nbytes", [2**40, 2**60, 2**63, 2**70])
def test_a_request_larger_than_the_gpu_is_out_of_memory_everywhere(policy, nbytes):
    # Not a misuse the front door refuses (PyTorch empties its cache and retries first), but the
    # same answer from every design: OutOfMemoryError, a RuntimeError as torch.OutOfMemoryError.
    dev = SimDevice("h100-80gb")
    try:
        a = make_allocator(dev, policy, "")
        with pytest.raises(Exception) as info:
            a.malloc(nbytes)
        assert type(info.value) is OutOfMemoryError, f"{policy}: {type(info.value).__name__}: {info.value}"
        a.free(a.malloc(MiB))                 # and it still works
    finally:
        dev.close()
