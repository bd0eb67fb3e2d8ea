"""Replay is linear in the trace and ends on any input.

Work is counted, not timed: ``DeviceReplay.work`` adds one per replay step and one per
event examined, so a quadratic replay shows up as work growing 4x when the trace doubles.
"""
import pytest

from allocator_ref.trace.engine import REORDER_WINDOW, Engine
from allocator_ref.trace.recording import device_recording
from allocator_ref.trace.replay import replay


def snapshot_run(n: int) -> list:
    return [{"action": "snapshot", "addr": 0, "size": 0, "stream": 0} for _ in range(n)]


def completions_nobody_waited_for(n: int) -> list:
    return [{"action": "free_completed", "addr": 0x1000 + 512 * i, "size": 512, "stream": 0}
            for i in range(n)]


def releases_then_new_memory(n: int) -> list:
    events = []
    for i in range(n // 2):
        events.append({"action": "segment_free", "addr": 2**30 + 2**21 * i, "size": 2**21, "stream": 0})
        events.append({"action": "segment_alloc", "addr": 2**30 + 2**21 * i, "size": 2**21, "stream": 0})
    events.append({"action": "alloc", "addr": 2**30, "size": 512, "stream": 0})
    return events


def unknown_frees(n: int) -> list:
    """Frees of blocks the trace never allocated: the rebuild must size each without quadratic search."""
    events = []
    for i in range(n // 2):
        addr = 2**30 + 2**20 * i
        events.append({"action": "free_requested", "addr": addr, "size": 700_000, "stream": 0})
        events.append({"action": "free_completed", "addr": addr, "size": 700_000, "stream": 0})
    return events


def work(events: list, verify: bool = True) -> int:
    result = replay({"segments": [], "device_traces": [events]}, verify=verify, progress=False)
    return result.devices[0].work if result.devices else 0     # snapshot entries alone: nothing to replay


@pytest.mark.parametrize("make, per_event", [
    (snapshot_run, 2), (completions_nobody_waited_for, 2), (unknown_frees, 4),
    (releases_then_new_memory, REORDER_WINDOW + 4),
])
@pytest.mark.parametrize("verify", [True, False], ids=["verify", "what-if"])
def test_replay_work_is_linear_in_the_trace(make, per_event, verify):
    small, large = work(make(1000), verify), work(make(4000), verify)
    assert large <= per_event * 4000
    # 4x the events must not cost much more than 4x the work (quadratic would be 16x).
    assert large <= 4.5 * max(small, 1)


def test_sixteen_thousand_snapshot_events_are_a_linear_walk():
    """The issue's case: 16,000 snapshot events took 37 s (quadratic) before.  They are now
    left out before the replay: around one malloc they cost no replay work at all."""
    events = snapshot_run(8_000) + [{"action": "segment_alloc", "addr": 2**30, "size": 2**21, "stream": 0},
                                    {"action": "alloc", "addr": 2**30, "size": 512, "stream": 0}] \
        + snapshot_run(8_000)
    result = replay({"segments": [{"address": 2**30, "total_size": 2**21, "stream": 0, "segment_type": "small",
                                   "blocks": [{"address": 2**30, "size": 512, "requested_size": 512,
                                               "state": "active_allocated"},
                                              {"address": 2**30 + 512, "size": 2**21 - 512,
                                               "state": "inactive"}]}],
                     "device_traces": [events]}, verify=True, progress=False)
    assert result.perfect and result.devices[0].snapshot_entries == 16_000
    assert result.devices[0].work <= 20


def test_a_malloc_that_makes_no_event_cannot_stall_the_replay():
    # Built below the field checks (which refuse a size-0 alloc): the loop itself must end.
    events = [{"action": "alloc", "addr": 0x1000, "size": 0, "stream": 0},
              {"action": "alloc", "addr": 0x2000, "size": 0, "stream": 0}]
    replayer = Engine(device_recording(events, []), progress=False)
    result = replayer.run()
    assert result.first_divergence is not None and result.work <= 10


@pytest.mark.parametrize("size", [0, 2**60, 2**63])
def test_absurd_alloc_sizes_are_refused_before_replay(size):
    from allocator_ref.trace import SnapshotError
    snap = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 0x1000, "size": size,
                                                 "stream": 0}]]}
    with pytest.raises(SnapshotError, match="'size'"):
        replay(snap, verify=True)


def test_huge_but_legal_request_replays_as_an_oom():
    snap = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 2**40, "size": 2**59,
                                                 "stream": 0}]]}
    result = replay(snap, progress=False)
    assert result.devices[0].ooms_raised == 1


def random_trace(seed: int) -> dict:
    """Well-typed nonsense: every action, addresses and sizes that overlap, two streams."""
    import random
    from allocator_ref.events import ACTIONS
    rnd = random.Random(seed)
    addrs = [2**40 + i * 2**21 for i in range(8)] + [2**40 + 512 * i for i in range(8)]
    events = []
    for _ in range(rnd.choice([20, 200])):
        action = rnd.choice(ACTIONS)
        e = {"action": action, "addr": 0 if action == "snapshot" else rnd.choice(addrs),
             "size": rnd.choice([512, 2**20, 2**21, 20 * 2**20, 3 * 2**20 + 512]),
             "stream": rnd.choice([0, 0, 7])}
        if action == "oom":
            e["device_free"] = 0
        events.append(e)
    segments = []
    if rnd.random() < 0.5:
        segments = [{"address": 2**40, "total_size": 2**21, "stream": 0, "segment_type": "large",
                     "blocks": [{"address": 2**40, "size": 2**20, "state": "active_allocated"},
                                {"address": 2**40 + 2**20, "size": 2**20, "state": "inactive"}]}]
    return {"segments": segments, "device_traces": [events]}


@pytest.mark.slow
def test_random_traces_end_with_a_report_or_one_clear_error():
    from allocator_ref.trace import SnapshotError
    reports = 0
    for seed in range(150):
        snap = random_trace(seed)
        n = len(snap["device_traces"][0])
        for verify in (True, False):
            try:
                result = replay(snap, verify=verify, progress=False)
            except SnapshotError as exc:          # e.g. a start state the trace contradicts
                assert "\n" not in str(exc) and str(exc).startswith("<dict>: ")
                continue
            reports += 1
            assert result.devices[0].work <= (REORDER_WINDOW + 4) * n + 10
    assert reports > 150
