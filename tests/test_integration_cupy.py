"""The CuPy hook: ``allocator_ref.integrations.cupy.use(allocator)``.

Without a GPU it runs against the CuPy-free stand-in (same calls as
``cupy.cuda``); the ``gpu``-marked test runs real CuPy on the reference
allocator over a CudaDevice and skips here.
"""
from __future__ import annotations

import gc

import pytest

from allocator_ref.caching import CachingAllocator
from allocator_ref.device import SimDevice
from allocator_ref.integrations import cupy as cupy_hook
from allocator_ref.integrations import cupy_standin
from allocator_ref.policies.registry import make_allocator, policy_names
from allocator_ref.policies import BFCAllocator

from conftest import require_gpu

POLICIES = {   # every registered design, and the caching one with expandable segments
    **{name: (lambda d, name=name: make_allocator(d, name, "")) for name in policy_names()},
    "expandable": lambda d: CachingAllocator(d, "expandable_segments:True"),
}


@pytest.fixture
def sim():
    dev = SimDevice("tiny-1gb")
    yield dev
    dev.close()


def _actions(alloc):
    return [(e.action, e.size) for e in alloc.trace.entries]


def test_arrays_malloc_and_free_through_the_reference_allocator(sim):
    alloc = CachingAllocator(sim)
    alloc.record_memory_history("all")
    cp = cupy_standin.new()
    with cupy_hook.use(alloc, cupy_module=cp):
        x = cp.empty(1000)
        y = cp.empty(3 << 20)
        assert alloc.memory_allocated() == 1024 + (3 << 20)
        assert {x.data.ptr, y.data.ptr} == {a.ptr for a in alloc.live_allocations()}
        assert x.data.mem.size == 1000 and x.data.device_id == 0
        stats = alloc.memory_stats()
        assert stats["allocation.all.current"] == 2
        del x
        assert alloc.memory_allocated() == 3 << 20
        del y
        assert alloc.memory_allocated() == 0
        assert alloc.memory_reserved() > 0          # the caching allocator kept the segments
    stats = alloc.memory_stats()
    assert stats["allocation.all.allocated"] == 2 and stats["allocation.all.freed"] == 2
    acts = _actions(alloc)
    assert [a for a, _ in acts if a in ("alloc", "free_completed")] == ["alloc", "alloc", "free_completed",
                                                                        "free_completed"]
    assert ("alloc", 1000) in acts and ("alloc", 3 << 20) in acts
    assert cp.raw_mallocs == 0


def test_previous_allocator_is_restored_even_on_error(sim):
    alloc = CachingAllocator(sim)
    cp = cupy_standin.new()
    before = cp.cuda.get_allocator()
    with pytest.raises(RuntimeError):
        with cupy_hook.use(alloc, cupy_module=cp) as hook:
            assert cp.cuda.get_allocator() is hook
            raise RuntimeError("boom")
    assert cp.cuda.get_allocator() is before
    cp.empty(64)                                    # the stand-in's own "cudaMalloc" again
    assert cp.raw_mallocs == 1 and alloc.memory_allocated() == 0


def test_nested_use_restores_outer_hook(sim):
    a1, a2 = CachingAllocator(sim), BFCAllocator(sim)
    cp = cupy_standin.new()
    with cupy_hook.use(a1, cupy_module=cp) as outer:
        with cupy_hook.use(a2, cupy_module=cp):
            z = cp.empty(4096)
            assert a2.memory_allocated() > 0 and a1.memory_allocated() == 0
        assert cp.cuda.get_allocator() is outer
        w = cp.empty(4096)
        assert a1.memory_allocated() > 0
        del z, w
    assert a1.memory_allocated() == 0 and a2.memory_allocated() == 0


def test_array_outliving_the_block_frees_later(sim):
    alloc = CachingAllocator(sim)
    cp = cupy_standin.new()
    with cupy_hook.use(alloc, cupy_module=cp):
        x = cp.empty(8192)
    assert alloc.memory_allocated() == 8192
    del x
    gc.collect()
    assert alloc.memory_allocated() == 0


def test_zero_bytes_is_a_null_pointer_without_a_block(sim):
    alloc = CachingAllocator(sim)
    cp = cupy_standin.new()
    with cupy_hook.use(alloc, cupy_module=cp):
        p = cp.cuda.alloc(0)
        assert p.ptr == 0 and p.device_id == 0
    assert alloc.memory_stats().get("allocation.all.allocated", 0) == 0


def test_current_stream_is_passed_to_the_allocator(sim):
    alloc = CachingAllocator(sim)
    alloc.record_memory_history("all")
    cp = cupy_standin.new()
    with cupy_hook.use(alloc, cupy_module=cp) as hook:
        with cp.cuda.Stream() as s:
            x = cp.empty(2048)
        y = cp.empty(2048)
        (ax,) = [a for a in alloc.live_allocations() if a.ptr == x.data.ptr]
        (ay,) = [a for a in alloc.live_allocations() if a.ptr == y.data.ptr]
        assert ax.stream.handle == s.ptr and ay.stream is sim.default_stream
        assert hook.stream_map.adopted[s.ptr] is ax.stream
        del x, y
    streams = {e.stream for e in alloc.trace.entries if e.action == "alloc"}
    assert streams == {0, s.ptr}


def test_using_allocator_forbids_set_allocator_like_cupy(sim):
    cp = cupy_standin.new()
    with cp.cuda.using_allocator(cupy_hook.malloc_hook(CachingAllocator(sim), cp)):
        with pytest.raises(ValueError):
            cp.cuda.set_allocator(None)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_plugs_in(sim, name):
    alloc = POLICIES[name](sim)
    cp = cupy_standin.new()
    with cupy_hook.use(alloc, cupy_module=cp):
        arrays = [cp.empty(n) for n in (512, 10_000, 1 << 20, 5 << 20)]
        assert alloc.memory_allocated() >= sum(a.nbytes for a in arrays)
        ptrs = sorted((a.data.ptr, a.nbytes) for a in arrays)
        assert all(p + n <= q for (p, n), (q, _) in zip(ptrs, ptrs[1:])), "arrays overlap"
        del arrays
    assert alloc.memory_allocated() == 0


def test_unknown_device_is_refused(sim):
    cp = cupy_standin.new(device_id=1)
    with cupy_hook.use(CachingAllocator(sim), cupy_module=cp):
        with pytest.raises(ValueError, match="current device is 1"):
            cp.empty(16)


# --------------------------------------------------------------------- real GPU
@pytest.mark.gpu
def test_real_cupy_workload_on_the_reference_allocator():
    require_gpu()
    import cupy
    import numpy as np
    from allocator_ref.device.cuda import CudaDevice

    dev = CudaDevice(0)
    alloc = CachingAllocator(dev)
    alloc.record_memory_history("all")
    try:
        with cupy_hook.use(alloc):
            rng = np.random.default_rng(0)
            a_h = rng.standard_normal((256, 256), dtype=np.float32)
            b_h = rng.standard_normal((256, 256), dtype=np.float32)
            a, b = cupy.asarray(a_h), cupy.asarray(b_h)
            total = cupy.zeros((256, 256), dtype=cupy.float32)
            for _ in range(20):                     # allocation-heavy: temporaries every step
                total += (a @ b) * 0.5 + cupy.tanh(a)
            result = cupy.asnumpy(total)
            assert alloc.memory_stats()["allocation.all.allocated"] >= 40
            assert alloc.memory_allocated() >= 3 * a_h.nbytes
            del a, b, total
            cupy.cuda.Device().synchronize()
        expected = 20 * ((a_h @ b_h) * 0.5 + np.tanh(a_h))
        np.testing.assert_allclose(result, expected, rtol=1e-3, atol=1e-2)
        assert alloc.memory_allocated() == 0
        acts = [e.action for e in alloc.trace.entries]
        assert acts.count("alloc") == acts.count("free_requested")
    finally:
        alloc.empty_cache()
        dev.close()
