"""Replay is linear in the trace and ends on any input.

Work is counted, not timed: ``DeviceReplay.work`` adds one per replay step and one per
event examined, so a quadratic replay shows up as work growing 4x when the trace doubles.
"""
import pytest

from allocator_ref.trace.replay import REORDER_WINDOW, _DeviceReplayer, replay


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
    return result.devices[0].work


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
    """The issue's case: 16,000 snapshot events took 37 s (quadratic) before."""
    assert work(snapshot_run(16_000)) <= 2 * 16_000


def test_a_malloc_that_makes_no_event_cannot_stall_the_replay():
    # Built below the field checks (which refuse a size-0 alloc): the loop itself must end.
    events = [{"action": "alloc", "addr": 0x1000, "size": 0, "stream": 0},
              {"action": "alloc", "addr": 0x2000, "size": 0, "stream": 0}]
    replayer = _DeviceReplayer(0, events, [], "", "caching", True, "h100-80gb", None, False)
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
