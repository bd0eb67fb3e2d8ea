"""A hypothesis state machine over the caching allocator's whole API, on several streams.

Rules: malloc, free, record_stream, empty_cache, set_allocator_settings,
record_memory_history, caching_allocator_enable and stream destruction, on three
streams of the 1 GiB simulated device.  After every
step: test_cuda_multigpu.py ``_check_memory_stat_consistency`` (stats recomputed from the
snapshot), allocated <= reserved, and no two live allocations overlap.  For programs
whose history was on from the start with fixed settings (what a real recording is), a
random subset of them must replay through ``replay(..., verify=True)`` at 100%: the
reference reproduces its own decisions from its own trace, as it does PyTorch's.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import allocator_ref as ar
from allocator_ref.trace.replay import replay
from caching_helpers import MiB
from test_pytorch_restated_cuda import _check_memory_stat_consistency

PROFILE = "tiny-1gb"
CONFIGS = ["", "expandable_segments:True", "max_split_size_mb:40", "roundup_power2_divisions:4",
           "max_split_size_mb:40,expandable_segments:True"]
SIZES = st.one_of(st.integers(1, 4096), st.integers(4097, 2 * MiB),
                  st.integers(2 * MiB, 30 * MiB), st.sampled_from([45 * MiB, 120 * MiB, 300 * MiB]))


class AllocatorMachine(RuleBasedStateMachine):
    @initialize(config=st.sampled_from(CONFIGS), history=st.booleans(), check_replay=st.booleans())
    def start(self, config, history, check_replay):
        self.device = ar.SimDevice(PROFILE)
        self.free_at_start = self.device.mem_get_info()[0]
        self.a = ar.CachingAllocator(self.device, config)
        self.streams = [self.device.default_stream, self.device.create_stream(),
                        self.device.create_stream()]
        self.live = []
        self.replayable = history
        self.check_replay = check_replay
        if history:
            self.a.record_memory_history("all", context="all")

    @rule(size=SIZES, stream=st.integers(0, 2))
    def malloc(self, size, stream):
        try:
            self.live.append(self.a.malloc(size, self.streams[stream]))
        except ar.OutOfMemoryError:
            pass
        except ar.CudaOutOfMemoryError:
            # caching off: uncached_allocate's C10_CUDA_CHECK(cudaMalloc) raises the CUDA error
            assert not self.a.is_caching_enabled()

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 10**6))
    def free(self, index):
        self.a.free(self.live.pop(index % len(self.live)))

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 10**6), stream=st.integers(0, 2))
    def record_stream(self, index, stream):
        self.a.record_stream(self.live[index % len(self.live)], self.streams[stream])

    @rule()
    def empty_cache(self):
        self.a.empty_cache()

    @rule(text=st.sampled_from(CONFIGS + ["garbage_collection_threshold:0.5"]))
    def set_allocator_settings(self, text):
        self.a.set_allocator_settings(text)
        self.replayable = False       # a snapshot records only the last settings

    @rule(enabled=st.sampled_from([None, "state", "all"]),
          context=st.sampled_from([None, "state", "alloc", "all"]))
    def record_memory_history(self, enabled, context):
        self.a.record_memory_history(enabled, context=context)
        self.replayable = False

    @rule(stream=st.integers(1, 2))
    def destroy_stream(self, stream):
        # cudaStreamDestroy with blocks still on the stream; later work uses a fresh one
        self.device.destroy_stream(self.streams[stream])
        self.streams[stream] = self.device.create_stream()
        self.replayable = False       # a trace does not record stream destruction

    @rule(enabled=st.booleans())
    def caching_allocator_enable(self, enabled):
        self.a.caching_allocator_enable(enabled)
        self.replayable = False

    @invariant()
    def consistent(self):
        if not hasattr(self, "a"):
            return
        _check_memory_stat_consistency(self.a)
        assert self.a.memory_allocated() <= self.a.memory_reserved()
        spans = sorted((x.ptr, x.ptr + x.size) for x in self.live if x.ptr)
        for (s0, e0), (s1, _) in zip(spans, spans[1:]):
            assert e0 <= s1, f"live allocations overlap at {s1:#x}"

    def teardown(self):
        if not hasattr(self, "a"):
            return
        if self.replayable and self.check_replay and self.a.trace.entries:
            report = replay(self.a.snapshot(), verify=True, profile=PROFILE, progress=False).to_json()
            assert report["first_divergence"] is None, report["first_divergence"]
            assert report["allocs_exact"] == report["allocs"]
            assert report["ooms_raised"] == report["ooms_expected"]
            assert report["final_state_equal"] is True
        self.a.close()
        assert self.device.mem_get_info()[0] == self.free_at_start
        self.device.close()


AllocatorMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
test_allocator_state_machine = AllocatorMachine.TestCase


@pytest.mark.slow
class TestAllocatorStateMachineLong(AllocatorMachine.TestCase):
    settings = settings(max_examples=200, stateful_step_count=50, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
