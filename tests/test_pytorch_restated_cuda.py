"""PyTorch's own allocator tests, restated against the reference allocator.

Each test names the PyTorch file and test it restates and keeps its numbers and
assertions; ``torch.rand(311, 411)`` becomes ``malloc(311 * 411 * 4)`` (float32),
a tensor going out of scope becomes ``free``.  test/test_cuda_expandable_segments.py
re-runs TestCuda and TestCudaAllocator with ``expandable_segments:True``: every test
here runs in both modes (the ``mode`` fixture), except where PyTorch's test itself
sets the mode.

Not portable, and why (so not faked here):
* test_cuda.py test_memory_snapshot_with_cpp, test_cycles, test_direct_traceback,
  test_memory_plots' "::rand" check, test_cpp_memory_snapshot_pickle's C++ frames:
  need C++ stack unwinding (there is no C++ under the reference allocator).
* test_memory_snapshot's ``_save_segment_usage`` and test_memory_plots' trace_plot /
  segment_plot: torch.cuda._memory_viz renders the snapshot; tests/test_memory_viz_torch.py
  covers that with the real module.
* test_memory_snapshot_script (TorchScript frames), test_memory_compile_regions
  (torch.compile regions), test_memory_profiler_viz (the profiler): need torch itself.
* TestBlockStateAbsorption, test_graph_* and the graph-capture reclaim tests: CUDA graphs.
* TestMemPool: private pools belong to the MemPool work (another area).
* test_record_stream*, test_caching_allocator_record_stream_oom: need real kernels racing
  on streams (the stream-safety tests of tests/test_caching_streams.py cover the rules).
* test_cuda_multigpu.py test_memory_stats_multigpu: two GPUs.
* test_set_per_process_memory_fraction's ``tensor.fill_`` after the OOM is restated as a
  device fill + read; test_out_of_memory's likewise.
"""
from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.caching.backend import _loaded_backend
from caching_helpers import MiB, make_alloc  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
FLOAT = 4


@pytest.fixture(params=["native", "expandable"])
def mode(request):
    """test_cuda_expandable_segments.py: the same tests with expandable_segments:True."""
    return "expandable_segments:True" if request.param == "expandable" else ""


@pytest.fixture
def alloc(make_alloc, mode):
    return make_alloc(mode)


def _check_memory_stat_consistency(a):
    """test_cuda_multigpu.py TestCudaMultiGPU._check_memory_stat_consistency, line for line."""
    snapshot = a.segments(record=False)
    expected_each_device = collections.defaultdict(lambda: collections.defaultdict(int))
    for segment in snapshot:
        expandable = segment["is_expandable"]
        expected = expected_each_device[segment["device"]]
        pool_str = segment["segment_type"] + "_pool"
        if not expandable:
            expected["segment.all.current"] += 1
            expected["segment." + pool_str + ".current"] += 1
        expected["allocated_bytes.all.current"] += segment["allocated_size"]
        expected["allocated_bytes." + pool_str + ".current"] += segment["allocated_size"]
        expected["reserved_bytes.all.current"] += segment["total_size"]
        expected["reserved_bytes." + pool_str + ".current"] += segment["total_size"]
        expected["active_bytes.all.current"] += segment["active_size"]
        expected["active_bytes." + pool_str + ".current"] += segment["active_size"]
        expected["requested_bytes.all.current"] += segment["requested_size"]
        expected["requested_bytes." + pool_str + ".current"] += segment["requested_size"]
        sum_requested = 0
        is_split = len(segment["blocks"]) > 1
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                expected["allocation.all.current"] += 1
                expected["allocation." + pool_str + ".current"] += 1
            if block["state"].startswith("active_"):
                sum_requested += block["requested_size"]
                expected["active.all.current"] += 1
                expected["active." + pool_str + ".current"] += 1
            if block["state"] == "inactive" and is_split and not expandable:
                expected["inactive_split.all.current"] += 1
                expected["inactive_split." + pool_str + ".current"] += 1
                expected["inactive_split_bytes.all.current"] += block["size"]
                expected["inactive_split_bytes." + pool_str + ".current"] += block["size"]
        assert sum_requested == segment["requested_size"]
    for _device, expected in expected_each_device.items():
        stats = a.memory_stats()
        for k, v in expected.items():
            assert v == stats[k], k


# ============================================================ test_cuda_multigpu.py
def _memory_stats_generator(a, N=35):
    """test_cuda_multigpu.py TestCudaMultiGPU._test_memory_stats_generator (FloatTensor -> malloc)."""
    m0 = a.memory_allocated()
    last_m_arr = [a.memory_allocated()]
    max_m_arr = [a.max_memory_allocated()]
    last_r_arr = [a.memory_reserved()]
    max_r_arr = [a.max_memory_reserved()]
    rng = random.Random(0)

    def alloc(*size):
        n = 1
        for s in size:
            n *= s
        return a.malloc(n * FLOAT)

    def assert_change(comp=1, empty_cache=False, reset_peak=False):
        new_m = a.memory_allocated()
        new_max_m = a.max_memory_allocated()
        if comp > 0:
            assert new_m > last_m_arr[0]
        elif comp < 0:
            assert new_m < last_m_arr[0]
        else:
            assert new_m == last_m_arr[0]
        assert new_m <= new_max_m
        assert new_max_m >= max_m_arr[0]
        last_m_arr[0] = new_m
        max_m_arr[0] = new_max_m
        new_r = a.memory_reserved()
        new_max_r = a.max_memory_reserved()
        assert new_r <= new_max_r
        assert new_max_r >= max_r_arr[0]
        last_r_arr[0] = new_r
        max_r_arr[0] = new_max_r
        if empty_cache:
            st = a.memory_stats()
            num_sync_1, num_alloc_1, num_free_1 = (st["num_sync_all_streams"], st["num_device_alloc"],
                                                   st["num_device_free"])
            assert num_sync_1 >= 0
            assert num_alloc_1 >= (0 if new_m == 0 else 1)
            assert num_free_1 >= 0
            a.empty_cache()
            st = a.memory_stats()
            assert num_sync_1 + 1 == st["num_sync_all_streams"]
            assert st["num_device_alloc"] >= num_alloc_1
            assert st["num_device_free"] >= num_free_1
            new_r = a.memory_reserved()
            new_max_r = a.max_memory_reserved()
            assert new_r <= last_r_arr[0]
            assert new_r <= new_max_r
            assert new_max_r == max_r_arr[0]
            last_r_arr[0] = new_r
        if reset_peak:
            a.reset_peak_memory_stats()
            assert a.memory_allocated() == last_m_arr[0]
            assert a.max_memory_allocated() == last_m_arr[0]
            max_m_arr[0] = last_m_arr[0]
            assert a.memory_reserved() == last_r_arr[0]
            assert a.max_memory_reserved() == last_r_arr[0]
            max_r_arr[0] = last_r_arr[0]

    assert_change(0)
    assert_change(0, reset_peak=True)
    assert_change(0, empty_cache=True)
    assert_change(0, reset_peak=True)
    assert_change(0)
    yield
    tensors1 = [alloc(1), alloc(10, 20), alloc(200, 300, 2000)]
    m1 = a.memory_allocated()
    assert_change(1)
    yield
    tensors2 = []
    for i in range(1, int(N / 2) + 1):            # small ones
        tensors2.append(alloc(i, i * 4))
        assert_change(1)
        yield
    for i in range(5, int(N / 2) + 5):            # large ones
        tensors2.append(alloc(i, i * 7, i * 9, i * 11))
        assert_change(1, reset_peak=(i % 2 == 0))
        yield
    tensors2.append(alloc(0, 0, 0))
    assert_change(0)
    yield
    permute = []
    for i in rng.sample(range(len(tensors2)), len(tensors2)):     # torch.randperm
        permute.append(tensors2[i])
        assert_change(0)
        yield
    # `del tensors2` while permute holds every tensor: nothing is freed
    assert_change(0)
    yield
    tensors2 = permute
    assert_change(0)
    yield
    assert_change(0, reset_peak=True)             # del permute: tensors2 still holds them
    yield
    for i in range(int(N / 2)):
        x = tensors2.pop(i)
        numel = x.requested_size // FLOAT
        a.free(x)
        assert_change(-numel)                     # in case that tensors2[i] is empty
        yield
    for i in range(2, int(2 * N / 3) + 2):
        tensors2.append(alloc(i, i * 3, i * 8))
        assert_change(1)
        yield
    for x in tensors2:
        a.free(x)
    assert_change(-1, reset_peak=True)
    assert_change(0)
    assert a.memory_allocated() == m1
    yield True
    for x in tensors1:
        a.free(x)
    assert_change(-1, reset_peak=True)
    assert a.memory_allocated() == m0
    assert_change(0, empty_cache=True)            # test empty_cache and reset_peak
    assert_change(0, reset_peak=True)


def test_multigpu_memory_stats(alloc):
    """test_cuda_multigpu.py TestCudaMultiGPU.test_memory_stats."""
    alloc.empty_cache()
    steps = 0
    for _ in _memory_stats_generator(alloc):
        _check_memory_stat_consistency(alloc)
        steps += 1
    assert steps > 60


# ============================================================ test_cuda.py TestCuda
def test_memory_allocation(alloc):
    """test_cuda.py TestCuda.test_memory_allocation (caching_allocator_alloc(1))."""
    alloc.empty_cache()
    prev = alloc.memory_allocated()
    mem = alloc.malloc(1)
    assert alloc.memory_allocated() > prev
    alloc.free(mem)
    assert alloc.memory_allocated() == prev


def test_caching_allocator_alloc_negative_size(alloc):
    """test_cuda.py TestCuda.test_caching_allocator_alloc_negative_size: ValueError "Invalid memory size"."""
    before = alloc.memory_stats()
    with pytest.raises(ValueError, match="Invalid memory size"):
        alloc.malloc(-1)
    assert alloc.memory_stats() == before


def test_memory_stats(alloc):
    """test_cuda.py TestCuda.test_memory_stats: torch.randn(256) is 1024 bytes of active memory."""
    a = alloc
    a.empty_cache()
    a.reset_peak_memory_stats()
    a.reset_accumulated_memory_stats()
    prev_allocated, prev_reserved = a.memory_allocated(), a.memory_reserved()
    prev_max_allocated, prev_max_reserved = a.max_memory_allocated(), a.max_memory_reserved()
    assert prev_allocated == prev_max_allocated
    assert prev_reserved == prev_max_reserved
    prev_active_current = a.memory_stats()["active_bytes.all.current"]
    tmp = a.malloc(256 * FLOAT)
    assert a.memory_stats()["active_bytes.all.current"] == 1024 + prev_active_current
    assert a.memory_stats()["active_bytes.all.freed"] == 0
    a.free(tmp)
    a.empty_cache()
    assert a.memory_stats()["active_bytes.all.current"] == prev_active_current
    assert a.memory_stats()["active_bytes.all.freed"] == 1024
    a.reset_peak_memory_stats()
    assert a.max_memory_allocated() == prev_max_allocated
    assert a.max_memory_reserved() == prev_max_reserved


def test_out_of_memory(alloc):
    """test_cuda.py TestCuda.test_out_of_memory."""
    a = alloc
    tensor = a.malloc(1024 * FLOAT)
    with pytest.raises(RuntimeError, match=r"Tried to allocate 800000000\.00 GiB\. GPU 0 has a total capacity of"):
        a.malloc(1024 * 1024 * 1024 * 800000000)
    with pytest.raises(RuntimeError, match=r"Tried to allocate more than 1EB memory"):
        a.malloc(1024 * 1024 * 1024 * 8000000000)
    # ensure out of memory error doesn't disturb subsequent kernel
    a.device.fill(tensor.ptr, tensor.size, 1)
    assert a.device.read(tensor.ptr, tensor.size) == b"\x01" * tensor.size
    a.free(tensor)


def test_out_of_memory_retry(alloc):
    """test_cuda.py TestCuda.test_out_of_memory_retry."""
    a = alloc
    a.empty_cache()
    total_memory = a.device.info.total_memory
    size = int(total_memory * 0.5)
    x = a.malloc(size)
    with pytest.raises(RuntimeError, match="Tried to allocate"):
        a.malloc(size)
    a.free(x)
    b = a.malloc(size)
    a.free(b)
    a.empty_cache()
    a.reset_peak_memory_stats()


def test_set_per_process_memory_fraction(alloc):
    """test_cuda.py TestCuda.test_set_per_process_memory_fraction."""
    a = alloc
    a.reset_peak_memory_stats()
    with pytest.raises(TypeError, match="Invalid type"):
        a.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        a.set_per_process_memory_fraction(-0.1)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        a.set_per_process_memory_fraction(2.0)
    tensor = a.malloc(1024 * FLOAT)
    a.empty_cache()
    total_memory = a.device.info.total_memory
    a.set_per_process_memory_fraction(0.5)
    # test 0.499 allocation is ok.
    application = int(total_memory * 0.499) - a.max_memory_reserved()
    tmp_tensor = a.malloc(application)
    a.free(tmp_tensor)
    a.empty_cache()
    application = int(total_memory * 0.5)
    # it will get OOM when try to allocate more than half memory.
    with pytest.raises(RuntimeError, match="out of memory"):
        a.malloc(application)
    a.device.fill(tensor.ptr, tensor.size, 1)
    assert a.device.read(tensor.ptr, tensor.size) == b"\x01" * tensor.size
    a.free(tensor)


def test_get_per_process_memory_fraction(make_alloc, mode):
    """test_cuda.py TestCuda.test_get_per_process_memory_fraction.

    torch.rand(3) draws float32 values (24-bit mantissas).  On a device whose total is a
    power of two (the 1 GiB profile) allowed = fraction * total is exact, so
    getMemoryFraction's allowed / total gives back exactly what was set.
    """
    a = make_alloc(mode, profile="tiny-1gb")
    init_fraction = a.get_per_process_memory_fraction()
    a.set_per_process_memory_fraction(1.0)
    assert a.get_per_process_memory_fraction() == 1.0
    a.set_per_process_memory_fraction(0.0)
    assert a.get_per_process_memory_fraction() == 0.0
    rng = random.Random(3)
    for val in [rng.randrange(1, 2**24) / 2**24 for _ in range(3)]:
        a.set_per_process_memory_fraction(val)
        assert a.get_per_process_memory_fraction() == val
    a.set_per_process_memory_fraction(init_fraction)


# ==================================================== test_cuda.py TestCudaMallocAsync
def test_memory_snapshot(alloc):
    """test_cuda.py TestCudaMallocAsync.test_memory_snapshot (history "state", stacks="python")."""
    a = alloc
    a.empty_cache()
    a.record_memory_history("state", stacks="python")
    # make x the second block in a segment
    a.free(a.malloc(2 * 311 * 411 * FLOAT))
    unused = a.malloc(310 * 410 * FLOAT)
    x = a.malloc(311 * 411 * FLOAT)
    # create a bunch of tensors that all will tile into the same segment
    tensors = [a.malloc(128 * FLOAT) for _ in range(1000)]
    rng = random.Random(0)
    while tensors:
        a.free(tensors.pop(rng.randint(0, len(tensors) - 1)))
    # exercise the history trimming code
    a.free(a.malloc(128 * 5 * FLOAT))
    ss = a.snapshot()
    found_it = False
    for seg in ss["segments"]:
        assert "frames" in seg
        for b in seg["blocks"]:
            if b["requested_size"] == 311 * 411 * 4:
                assert "test_pytorch_restated_cuda" in b["frames"][0]["filename"]
                found_it = True
                assert x.ptr == b["address"]
    assert found_it
    a.free(unused)
    a.free(x)
    a.empty_cache()
    ss = a.snapshot()
    # memory_snapshot.cpp: "state" keeps a one-entry ring, so the latest event is there
    assert ss["device_traces"][0][-1]["action"] in ("segment_free", "segment_unmap")
    a.record_memory_history(None)


@pytest.mark.parametrize("context", ["alloc", "all", "state"])
def test_memory_plots_free_stack(alloc, context):
    """test_cuda.py TestCudaMallocAsync.test_memory_plots_free_stack."""
    a = alloc
    a.empty_cache()
    a.record_memory_history(context=context)
    x = None

    def thealloc():
        nonlocal x
        x = a.malloc(3 * 4 * FLOAT)

    def thefree():
        nonlocal x
        a.free(x)
        x = None

    thealloc()
    thefree()
    ss = json.dumps(a.snapshot())
    assert ("thefree" in ss) == (context == "all")
    assert ("thealloc" in ss) == (context != "state")
    a.record_memory_history(None)


def test_memory_plots_history_context(alloc):
    """test_cuda.py TestCudaMallocAsync.test_memory_plots_history_context."""
    a = alloc
    a.empty_cache()
    x = None

    def replace(nbytes):
        nonlocal x
        old, x = x, None
        x = a.malloc(nbytes)
        if old is not None:
            a.free(old)

    def should_capture1():
        replace(4 * 4 * FLOAT)

    def should_not_capture():
        replace(3 * 4 * FLOAT)

    def should_capture2():
        replace(4 * 4 * FLOAT)

    a.record_memory_history(context="all", stacks="python")
    should_capture1()
    a.record_memory_history(context=None)
    should_not_capture()
    a.record_memory_history(context="all", stacks="python")
    should_capture2()
    ss = json.dumps(a.snapshot())
    assert "should_capture1" in ss
    assert "should_not_capture" not in ss
    assert "should_capture2" in ss
    a.free(x)
    a.record_memory_history(None)


@pytest.mark.parametrize("context", ["alloc", "all", "state"])
def test_memory_plots_free_segment_stack(alloc, context):
    """test_cuda.py TestCudaMallocAsync.test_memory_plots_free_segment_stack.

    DeviceCachingAllocator::emptyCache gathers the caller's stack
    (maybeGatherContext(RecordContext::ALL)): with context="all" the segment_free /
    segment_unmap entries carry the frame of ``empty_cache`` (torch.cuda.memory.empty_cache
    in PyTorch, the wrapper below here).
    """
    a = alloc

    def empty_cache():
        a.empty_cache()

    empty_cache()
    a.record_memory_history(context=context)
    a.free(a.malloc(3 * 4 * FLOAT))
    empty_cache()
    ss = json.dumps(a.snapshot())
    assert ("empty_cache" in ss) == (context == "all")
    a.record_memory_history(None)


@pytest.mark.parametrize("context", ["alloc", "all", "state"])
def test_memory_plots_metadata(alloc, context):
    """test_cuda.py TestCudaMallocAsync.test_memory_plots_metadata (_set_memory_metadata)."""
    a = alloc
    a.empty_cache()
    a.set_memory_metadata("metadata test")
    a.record_memory_history(context=context)
    a.free(a.malloc(3 * 4 * FLOAT))
    a.empty_cache()
    a.set_memory_metadata("")
    ss = a.snapshot()
    assert ss["device_traces"][0]
    for event in ss["device_traces"][0]:
        assert event["user_metadata"] == "metadata test"
    a.record_memory_history(None)


@pytest.mark.parametrize("skip_actions", [
    ["free_requested"], ["free_requested", "free_completed"], ["alloc"],
    ["segment_alloc", "segment_free"], [], None,
], ids=["single action", "multiple actions", "alloc action", "segment actions", "empty list",
        "None default"])
def test_memory_snapshot_skip_actions(alloc, skip_actions):
    """test_cuda.py TestCudaMallocAsync.test_memory_snapshot_skip_actions (None means [])."""
    a = alloc
    a.empty_cache()
    a.record_memory_history(context="all", stacks="python", skip_actions=skip_actions)
    a.free(a.malloc(128 * 128 * FLOAT))
    a.device.synchronize()
    ss = a.snapshot()
    device_trace = ss["device_traces"][0]
    assert len(device_trace) > 0
    if skip_actions:
        all_actions = {event["action"] for event in device_trace}
        for sa in skip_actions:
            assert sa not in all_actions
        assert len(all_actions - set(skip_actions)) > 0
    a.record_memory_history(None)


def _power2_div(size, div_factor):
    """test_cuda.py test_allocator_settings' helper, as written there."""
    pow2 = 1
    while pow2 < size:
        pow2 = pow2 * 2
    if pow2 == size:
        return pow2
    step = pow2 / 2 / div_factor
    ret = pow2 / 2
    while ret < size:
        ret = ret + step
    return ret


def test_allocator_settings(alloc):
    """test_cuda.py TestCudaMallocAsync.test_allocator_settings."""
    a = alloc
    a.empty_cache()
    key_allocated = "active_bytes.all.allocated"
    key_requested = "requested_bytes.all.allocated"
    nelems = 21 * 1024 * 1024
    nbytes = 4 * nelems
    nelems_big = 100 * 1024 * 1024
    nbytes_big = 4 * nelems_big
    keep = []
    start_mem = a.memory_stats()[key_allocated]
    a.set_allocator_settings("")
    keep.append(a.malloc(nbytes))
    reg_mem = a.memory_stats()[key_allocated]
    start_requested = a.memory_stats()[key_requested]
    a.set_allocator_settings("roundup_power2_divisions:4")
    keep.append(a.malloc(nbytes))
    pow2_div4_mem = a.memory_stats()[key_allocated]
    current_requested = a.memory_stats()[key_requested]
    assert reg_mem - start_mem == nbytes
    assert pow2_div4_mem - reg_mem == _power2_div(nbytes, 4)
    assert current_requested - start_requested == nbytes
    a.set_allocator_settings("garbage_collection_threshold:0.5")
    a.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40")
    # should have reset the power2 divisions now
    a.empty_cache()
    start_mem = a.memory_stats()[key_allocated]
    keep.append(a.malloc(nbytes))
    reg_mem = a.memory_stats()[key_allocated]
    assert reg_mem - start_mem == nbytes
    # roundup_power2_divisions knob array syntax
    a.empty_cache()
    a.set_allocator_settings(
        "garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    start_mem = a.memory_stats()[key_allocated]
    keep.append(a.malloc(nbytes))
    pow2_div8_mem = a.memory_stats()[key_allocated]
    assert pow2_div8_mem - start_mem == _power2_div(nbytes, 8)
    a.empty_cache()
    start_mem = a.memory_stats()[key_allocated]
    keep.append(a.malloc(nbytes_big))
    pow2_div2_mem = a.memory_stats()[key_allocated]
    assert pow2_div2_mem - start_mem == _power2_div(nbytes_big, 2)
    a.empty_cache()
    a.set_allocator_settings("release_lock_on_cudamalloc:True")
    start_mem = a.memory_stats()[key_allocated]
    keep.append(a.malloc(nbytes))
    reg_mem = a.memory_stats()[key_allocated]
    assert reg_mem - start_mem == nbytes
    for bad in ("foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
                "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
                "pinned_num_register_threads:none", "pinned_num_register_threads:1024"):
        with pytest.raises(ValueError):
            a.set_allocator_settings(bad)
    for x in keep:
        a.free(x)


def _run_script(script: str, env_updates: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")}
    env.update(env_updates)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", script], env=env, text=True, capture_output=True)


def test_allocator_backend():
    """test_cuda.py TestCudaMallocAsync.test_allocator_backend (read from the environment at load).

    parseEnvForBackend reads only the backend key: the invalid release_lock_on_cudamalloc:none
    is never validated when cudaMallocAsync is chosen.
    """
    script = (
        "import os\n"
        "os.environ['PYTORCH_ALLOC_CONF'] = "
        "'max_split_size_mb:20,backend:cudaMallocAsync,release_lock_on_cudamalloc:none'\n"
        "import allocator_ref as ar\n"
        "a = ar.make_allocator(ar.SimDevice('tiny-1gb'))\n"
        "print(ar.get_allocator_backend(), type(a).__name__)\n")
    result = _run_script(script, {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cudaMallocAsync StreamOrderedAllocator"


def test_backend_is_fixed_at_load_time(monkeypatch, make_alloc):
    """parseAllocatorConfig: a runtime backend other than the loaded one is an internal assert."""
    _loaded_backend.cache_clear()
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    try:
        assert ar.get_allocator_backend() == "native"
        monkeypatch.setenv("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync")
        assert ar.get_allocator_backend() == "native"          # read once, "at load time"
        a = make_alloc()
        with pytest.raises(RuntimeError) as err:
            a.set_allocator_settings("max_split_size_mb:40,backend:cudaMallocAsync")
        assert str(err.value) == ("Allocator backend parsed at runtime != allocator backend parsed "
                                  "at load time, cudaMallocAsync != native")
        a.set_allocator_settings("backend:native")
    finally:
        _loaded_backend.cache_clear()


@pytest.mark.parametrize("value,printed", [(0.0, "0.0"), (0.5, "0.5"), (1.0, "1.0")])
def test_allocator_memory_fraction_setting(value, printed):
    """test_cuda.py TestCudaMallocAsync.test_allocator_memory_fraction_setting."""
    script = ("import allocator_ref as ar\n"
              "a = ar.make_allocator(ar.SimDevice('tiny-1gb'))\n"
              "print(a.get_per_process_memory_fraction(), end='')\n")
    result = _run_script(script, {"PYTORCH_CUDA_ALLOC_CONF": f"per_process_memory_fraction:{value}"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == printed


@pytest.mark.parametrize("value", [-0.1, 1.1])
def test_allocator_memory_fraction_setting_invalid(value):
    """test_cuda.py test_allocator_memory_fraction_setting: -0.1 and 1.1 fail the process."""
    script = "import allocator_ref as ar\nar.make_allocator(ar.SimDevice('tiny-1gb'))\n"
    result = _run_script(script, {"PYTORCH_CUDA_ALLOC_CONF": f"per_process_memory_fraction:{value}"})
    assert result.returncode != 0
    assert "per_process_memory_fraction is invalid" in result.stderr, result.stderr


def test_cachingAllocator_raw_alloc(alloc):
    """test_cuda.py TestCudaMallocAsync.test_cachingAllocator_raw_alloc."""
    a = alloc

    def requested_bytes_alloc_stats(raw_alloc_size, stream):
        start = a.memory_stats()["requested_bytes.all.allocated"]
        mem_ptr = a.raw_alloc(raw_alloc_size, stream)
        finish = a.memory_stats()["requested_bytes.all.allocated"]
        a.raw_delete(mem_ptr)
        return finish - start

    a.empty_cache()
    stream = a.device.default_stream
    a.reset_accumulated_memory_stats()
    raw_alloc_size = 1024 * 1024
    try:
        a.caching_allocator_enable(False)
        assert requested_bytes_alloc_stats(raw_alloc_size, stream) == 0
    finally:
        a.caching_allocator_enable(True)
        assert requested_bytes_alloc_stats(raw_alloc_size, stream) == raw_alloc_size


def test_no_memory_caching_environment_variable():
    """forceUncachedAllocator: PYTORCH_NO_CUDA_MEMORY_CACHING=1 bypasses the cache; no stats move."""
    script = ("import allocator_ref as ar\n"
              "a = ar.make_allocator(ar.SimDevice('tiny-1gb'))\n"
              "x = a.malloc(1 << 20)\n"
              "print(a.memory_stats()['requested_bytes.all.allocated'], a.memory_reserved(), end='')\n"
              "a.free(x)\n")
    result = _run_script(script, {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0 0"


@pytest.mark.parametrize("max_split_size_mb_setting", [False, True])
def test_raises_oom(alloc, max_split_size_mb_setting):
    """test_cuda.py TestCudaMallocAsync.test_raises_oom."""
    if max_split_size_mb_setting:
        alloc.set_allocator_settings("max_split_size_mb:1024")
        alloc.empty_cache()
    with pytest.raises(ar.OutOfMemoryError):
        alloc.malloc(1024 * 1024 * 1024 * 1024 * FLOAT)


@pytest.mark.parametrize("ctx", [False, True])
def test_cpp_memory_snapshot_pickle(alloc, ctx):
    """test_cuda.py test_cpp_memory_snapshot_pickle: _record_memory_history(e, ctx, 10, ctx, ctx).

    NativeCachingAllocator::snapshot copies the trace before DeviceCachingAllocator::snapshot
    records its own entry, so the last entry is the alloc.  (Its C++ and TorchScript frames
    are not portable; the Python frame is.)
    """
    a = alloc
    a.record_memory_history("all", context="alloc" if ctx else None, max_entries=10)

    def the_script_fn():
        return a.malloc(311 * 411 * FLOAT)

    t = the_script_fn()
    mem = a.snapshot()
    found = False
    for s in mem["segments"]:
        for b in s["blocks"]:
            if b["state"] == "active_allocated" and b["requested_size"] == 311 * 411 * 4:
                if ctx:
                    assert "the_script_fn" in str(b["frames"])
                found = True
    last_action = mem["device_traces"][0][-1]
    assert last_action["action"] == "alloc"
    assert last_action["size"] == 311 * 411 * 4
    assert found
    a.free(t)
    a.record_memory_history(None)


def test_notifies_oom(alloc):
    """test_cuda.py TestCudaMallocAsync.test_notifies_oom (_cuda_attach_out_of_memory_observer)."""
    x = False

    def cb(device, alloc_size, device_alloc, device_free):
        nonlocal x
        x = True

    alloc.attach_out_of_memory_observer(cb)
    with pytest.raises(ar.OutOfMemoryError):
        alloc.malloc(1024 * 1024 * 1024 * 1024 * FLOAT)
    assert x
