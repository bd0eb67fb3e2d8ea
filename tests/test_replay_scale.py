"""The replay is linear in events *and* streams (issue 26: 100,000 events with a stream per
allocation took 223 s, quadratic in the streams).  Work is counted, never timed: the
figure itself is in benchmarks/bench_replay.py (``make bench``)."""
import random

import pytest

from allocator_ref.device import SimDevice
from allocator_ref.trace.engine import Engine
from allocator_ref.trace.replay import replay
from allocator_ref.trace.replay_device import ManyStreamsDevice, TraceDevice
from benchmarks.bench_replay import stream_heavy_snapshot


@pytest.mark.parametrize("cls", [ManyStreamsDevice, TraceDevice])
def test_the_o1_drain_time_is_the_scan_over_every_stream(cls):
    """cudaFree's wait: the running maximum must equal SimDevice's scan, whatever happened."""
    rng = random.Random(5)
    dev = cls("h100-80gb")
    streams = [dev.default_stream]
    for _ in range(400):
        op = rng.random()
        if op < 0.3:
            streams.append(dev.create_stream())
        elif op < 0.6:
            dev.sleep(rng.choice(streams), rng.uniform(0, 500))
        elif op < 0.75 and cls is ManyStreamsDevice:     # the replay's own events are manual
            event = dev.create_event()
            event.record(rng.choice(streams))
            dev.wait_event(rng.choice(streams), event)
        elif op < 0.85 and len(streams) > 1:
            dev.destroy_stream(streams.pop(rng.randrange(1, len(streams))))
        elif op < 0.95:
            dev.free(dev.malloc(2**21))              # the implicit sync moves the host clock
        else:
            dev.synchronize()
        assert dev._drain_time() == SimDevice._drain_time(dev)


def test_the_stream_heavy_trace_replays_exactly_without_trials():
    snap = stream_heavy_snapshot(events=5_000, streams=500)
    assert len({e["stream"] for e in snap["device_traces"][0]}) == 500
    clones = []
    original = Engine._clone

    def counting(self):
        clones.append(1)
        return original(self)

    Engine._clone = counting
    try:
        result = replay(snap, verify=True, progress=False)
    finally:
        Engine._clone = original
    device = result.devices[0]
    assert result.perfect and device.allocs == device.allocs_exact == 1_000
    # A trial copies the whole state (every stream and segment): none is needed here.
    assert clones == []


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "what-if"])
def test_work_grows_linearly_with_events_and_streams(verify):
    def work(streams):
        snap = stream_heavy_snapshot(events=5 * streams, streams=streams)
        return replay(snap, verify=verify, progress=False).devices[0].work
    small, large = work(300), work(1_200)
    assert large <= 4.5 * small


def test_the_fast_entry_check_accepts_only_what_the_full_check_accepts():
    """validate.py checks plain trace entries on a fast path: it must never accept more."""
    from allocator_ref.trace.validate import SnapshotError, _Checker, _plain_entry
    rng = random.Random(7)
    good = {"addr": [0, 2**40, 2**64 - 512], "size": [0, 1, 512, 2**60 - 1], "stream": [0, 7, 2**64 - 1],
            "time_us": [None, 0, 2**62], "device_free": [0, 2**30], "pool_id": [(0, 0), [1, 2]],
            "compile_context": ["N/A"], "user_metadata": [""]}
    bad = [-1, True, None, 1.5, "7", 2**64, 2**60, 2**63, (1,), (True, 0), [0, "0"], {}]

    class NotPlain(dict):         # type() is not dict: the fast path steps aside, the full check runs
        pass

    accepted = 0
    for _ in range(6000):
        e = {"action": rng.choice(["alloc", "free_requested", "free_completed", "snapshot", "oom",
                                   "segment_map", "segment_free", "bogus", 3])}
        for key, choices in good.items():
            roll = rng.random()
            if roll < 0.75:
                e[key] = rng.choice(choices)
            elif roll < 0.85:
                e[key] = rng.choice(bad)
        if not _plain_entry(e):
            continue
        accepted += 1
        try:
            _Checker(distinct_records=False).entry(0, 0, NotPlain(e))
        except SnapshotError as exc:
            raise AssertionError(f"the fast path accepted {e}; the full check says: {exc}")
    assert accepted > 200


def test_a_stream_met_later_never_finds_its_handle_taken_by_a_guard():
    """The replay holds each deferred free on a guard stream of its own; their handles used to
    follow the largest trace stream (+0x1000), which a stream created later could have."""
    from allocator_ref.caching import CachingAllocator
    dev = SimDevice("h100-80gb")
    a = CachingAllocator(dev)
    a.record_memory_history(context=None)
    first = dev.create_stream(handle=5)
    x = a.malloc(1000, first)
    a.record_stream(x, dev.default_stream)
    dev.sleep(dev.default_stream, 10**9)
    a.free(x)                                    # deferred: the replay makes a guard stream
    a.malloc(1000, dev.create_stream(handle=5 + 0x1000))
    result = replay(a.snapshot(), verify=True, progress=False)
    assert result.perfect, result.first_divergence
