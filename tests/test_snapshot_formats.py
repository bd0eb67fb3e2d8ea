"""Every snapshot a user brings loads, replays and verifies (issue 26).

Each class of file is made here from a run the project records on the simulated device,
then rewritten into the shape in question (``trace/formats.py`` for PyTorch's older
generations); nothing recorded elsewhere is stored.  Each is tried the way a user meets
it: ``python -m allocator_ref replay FILE --verify``, whose exit status must be 0 exactly
when everything matched.
"""
import copy
import pickle

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.device import SimDevice
from allocator_ref.trace import SnapshotError, load_snapshot
from allocator_ref.trace.device_traces import device_events, devices_of
from allocator_ref.trace.formats import GENERATIONS, rewrite_as
from allocator_ref.trace.replay import TraceStepper, replay

MiB = 2**20


def record(index: int = 0, snapshot_first: bool = False, pending: bool = True, seed: int = 0) -> dict:
    """A run on simulated device ``index``: both pools, two streams, a cross-stream free still
    pending at the end (its stream is busy), a free block between live ones, and, when asked,
    a ``snapshot`` entry at event 0 and one in the middle (someone called memory_snapshot())."""
    dev = SimDevice("h100-80gb", index=index)
    a = ar.CachingAllocator(dev)
    a.record_memory_history(context=None)
    if snapshot_first:
        a.snapshot()                     # the 'snapshot' entry lands at event 0
    side = dev.create_stream()
    live = [a.malloc(size) for size in (1000, 3 * MiB, 700, 25 * MiB, 5 * MiB + 7, 2 * MiB)]
    a.free(live.pop(1))                  # a free block between two live ones
    live.append(a.malloc(9000 + seed, side))
    a.snapshot()                         # a 'snapshot' entry in the middle
    a.free(live.pop(0))
    live.append(a.malloc(12 * MiB))
    if pending:
        shared = a.malloc(4 * MiB)
        a.record_stream(shared, side)
        dev.sleep(side, 10**9)           # the side stream is busy: the free waits for it
        a.free(shared)
    snap = a.snapshot()
    return snap


def snapshot_with_pending() -> dict:
    snap = record()
    states = [b["state"] for s in snap["segments"] for b in s["blocks"]]
    assert "active_pending_free" in states and "inactive" in states
    return snap


def verify_cli(tmp_path, obj, capsys, protocol: int = 4, name: str = "snap.pickle") -> tuple:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    code = main(["replay", str(path), "--verify"])
    return code, capsys.readouterr().out


# ---------------------------------------------------------------- 1. snapshot entries in a trace

def test_snapshot_entries_at_the_start_and_middle_change_nothing(tmp_path, capsys):
    snap = record(snapshot_first=True)
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions[0] == "snapshot" and actions.count("snapshot") == 2
    result = replay(snap, verify=True, progress=False)
    device = result.devices[0]
    assert result.perfect and device.allocs_exact == device.allocs == actions.count("alloc")
    assert device.snapshot_entries == 2 and device.ooms_raised == 0
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 0 and "2 'snapshot' entries left out" in out and ": verified" in out


def test_a_divergence_is_reported_at_its_place_in_the_raw_trace():
    snap = record(snapshot_first=True)
    trace = snap["device_traces"][0]
    k = max(i for i, e in enumerate(trace) if e["action"] == "alloc")
    trace[k] = dict(trace[k], addr=trace[k]["addr"] + 512)      # PyTorch "placed" it elsewhere
    result = replay(snap, verify=True, progress=False)
    assert not result.perfect
    div = result.first_divergence
    at = trace[div.index]                  # the index is the file's: the event it names is the one shown
    assert at["action"] != "snapshot" and div.index <= k
    assert {key: at[key] for key in div.expected} == div.expected


def test_readers_of_a_trace_skip_snapshot_entries():
    snap = record(snapshot_first=True)
    events = device_events(snap, 0)
    assert all(e["action"] != "snapshot" for e in events)
    assert len(events) == len(snap["device_traces"][0]) - 2
    stepper = TraceStepper(snap)
    stepper.run_until(len(stepper.events))
    assert stepper.divergence is None and stepper.events == events


# ---------------------------------------------------------------- 2. older generations

@pytest.mark.parametrize("generation", GENERATIONS)
def test_every_generation_loads_replays_and_verifies(generation, tmp_path, capsys):
    current = snapshot_with_pending()
    old = rewrite_as(current, generation)
    if generation != "current":
        segments = old if generation == "list" else old["segments"]
        assert all("address" not in b for s in segments for b in s["blocks"])
    code, out = verify_cli(tmp_path, old, capsys)
    assert code == 0, out
    loaded = load_snapshot(tmp_path / "snap.pickle")
    for ours, theirs in zip(loaded["segments"], current["segments"]):   # the derived addresses are the real ones
        assert [b["address"] for b in ours["blocks"]] == [b["address"] for b in theirs["blocks"]]
    if generation == "list":
        assert "state only" in out           # memory_snapshot()'s list has no trace
    else:
        assert f"{len(device_events(current, 0))} events replayed" in out and "1 'snapshot' entries" in out


def test_pytorch_2_0_history_gives_the_requested_size():
    current = snapshot_with_pending()
    loaded = load_snapshot_from(rewrite_as(current, "history"))
    want = [b.get("requested_size") for s in current["segments"] for b in s["blocks"] if b["state"] != "inactive"]
    got = [b.get("requested_size") for s in loaded["segments"] for b in s["blocks"] if b["state"] != "inactive"]
    assert got == want and all(r is not None for r in got)


def load_snapshot_from(obj):
    from allocator_ref.trace import loads_snapshot
    return loads_snapshot(pickle.dumps(obj, protocol=4))


@pytest.mark.parametrize("generation", ["no-address", "history"])
def test_an_old_file_whose_blocks_do_not_tile_gets_one_line(generation, tmp_path, capsys):
    old = rewrite_as(snapshot_with_pending(), generation)
    old["segments"][0]["blocks"][0]["size"] += 512
    path = tmp_path / "bad.pickle"
    path.write_bytes(pickle.dumps(old, protocol=4))
    assert main(["replay", str(path), "--verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "segment 0" in err and "total_size" in err


# ---------------------------------------------------------------- 3. state only

def state_only(snap: dict) -> dict:
    return {**copy.deepcopy(snap), "device_traces": []}


def test_a_state_only_file_is_rebuilt_and_compared_exactly(tmp_path, capsys):
    snap = state_only(snapshot_with_pending())
    result = replay(snap, verify=True, progress=False)
    device = result.devices[0]
    assert device.state_only and device.final_state_equal is True and result.perfect
    assert device.segments_compared == len(snap["segments"]) > 0
    # No run to take peaks over: the figures are the snapshot's own moment.
    assert device.peak_reserved == sum(s["total_size"] for s in snap["segments"])
    assert device.peak_allocated == sum(s["allocated_size"] for s in snap["segments"])
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 0 and "state only" in out and ": verified" in out


def test_pending_free_blocks_come_back_pending():
    snap = state_only(snapshot_with_pending())
    from allocator_ref.trace.engine import Engine
    from allocator_ref.trace.recording import device_recording
    replayer = Engine(device_recording([], snap["segments"], ""), progress=False)
    replayer.run()
    states = lambda segs: sorted((b["address"], b["state"]) for s in segs for b in s["blocks"])  # noqa: E731
    assert states(replayer.allocator.segments(record=False)) == states(snap["segments"])
    assert any(state == "active_pending_free" for _, state in states(snap["segments"]))
    from allocator_ref.caching import check_stats_consistency
    check_stats_consistency(replayer.allocator.segments(record=False), replayer.allocator.memory_stats())


def _tamper_merge(snap):
    """Two free neighbours PyTorch would have merged: cut the first free block in two."""
    for seg in snap["segments"]:
        for j, b in enumerate(seg["blocks"]):
            if b["state"] == "inactive" and b["size"] >= 1024:
                half = b["size"] // 2 // 512 * 512
                seg["blocks"][j:j + 1] = [dict(b, size=half),
                                          dict(b, address=b["address"] + half, size=b["size"] - half)]
                return
    raise AssertionError("no free block to cut")


def _tamper_state(snap):
    block = next(b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_pending_free")
    block["state"] = "active_allocated"        # the segment's allocated_size now disagrees


def _tamper_total(snap):
    seg = next(s for s in snap["segments"] if s["requested_size"])
    seg["requested_size"] -= 1


@pytest.mark.parametrize("tamper", [_tamper_merge, _tamper_state, _tamper_total])
def test_a_state_only_file_that_no_allocator_could_be_in_is_not_verified(tamper, tmp_path, capsys):
    snap = state_only(snapshot_with_pending())
    tamper(snap)
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 1 and "NOT verified" in out


# ---------------------------------------------------------------- 4. several devices

def several_devices() -> dict:
    """Three devices with events, and a fourth whose trace holds only a 'snapshot' entry."""
    runs = [record(index=i, seed=i) for i in range(3)]
    snap = {"segments": [s for r in runs for s in r["segments"]],
            "device_traces": [r["device_traces"][0] for r in runs]
            + [[{"action": "snapshot", "addr": 0, "size": 0, "stream": 0}]],
            "allocator_settings": runs[0]["allocator_settings"]}
    return snap


def test_every_device_with_events_is_replayed_and_reported(tmp_path, capsys):
    snap = several_devices()
    assert devices_of(snap) == [0, 1, 2]
    result = replay(snap, verify=True, progress=False)
    assert [d.device for d in result.devices] == [0, 1, 2]
    assert result.perfect and all(d.final_state_equal for d in result.devices)
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 0 and all(f"device {i}: " in out for i in range(3)) and "device 3" not in out


def test_a_difference_on_one_device_fails_the_whole_verify(tmp_path, capsys):
    snap = several_devices()
    seg = next(s for s in snap["segments"] if s["device"] == 2)
    seg["stream"] += 1                          # PyTorch's final state on device 2 differs
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 1 and "device 2: " in out and "NOT verified" in out


def test_the_doctor_survives_a_device_with_only_a_snapshot_entry(tmp_path, capsys):
    path = tmp_path / "multi.pickle"
    path.write_bytes(pickle.dumps(several_devices(), protocol=4))
    code = main(["doctor", str(path), "--device-memory", "80"])
    out, err = capsys.readouterr()
    assert code in (0, 1) and "Traceback" not in err and "max()" not in err
    assert main(["doctor", str(path), "--device", "3"]) == 2
    err = capsys.readouterr().err
    assert "device 3 has no trace events" in err and err.strip().count("\n") == 0


# ---------------------------------------------------------------- 5. what _dump_snapshot writes

def test_pickle_protocol_5_loads(tmp_path, capsys):
    code, out = verify_cli(tmp_path, snapshot_with_pending(), capsys, protocol=5)
    assert code == 0 and ": verified" in out


@pytest.mark.parametrize("empty", [
    {"segments": [], "device_traces": []},
    {"segments": [], "device_traces": [[]]},
    {"segments": [], "device_traces": [[], [], [], []]},
    {"segments": [], "device_traces": [[{"action": "snapshot", "addr": 0, "size": 0, "stream": 0}]]},
    [],
], ids=["no-devices", "one-empty-trace", "four-empty-traces", "only-a-snapshot-entry", "empty-list"])
def test_empty_snapshots_verify_with_nothing_to_check(empty, tmp_path, capsys):
    code, out = verify_cli(tmp_path, empty, capsys)
    assert code == 0 and "nothing to verify" in out
    path = tmp_path / "snap.pickle"
    assert main(["replay", str(path)]) == 0          # a replay of nothing is no error either
    capsys.readouterr()
    # The what-if table and the doctor have nothing to replay: one line that says how to record one
    # (issue 27: only a snapshot with no segments and no events is refused), never an internal error.
    for command in ("compare", "doctor"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and "_record_memory_history" in err[0]


def test_device_traces_shorter_than_the_devices(tmp_path, capsys):
    snap = several_devices()
    snap["device_traces"] = snap["device_traces"][:1]     # history was on for device 0 only
    result = replay(snap, verify=True, progress=False)
    assert [(d.device, d.state_only) for d in result.devices] == [(0, False), (1, True), (2, True)]
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 0 and out.count(": verified") == 3


def test_a_state_only_device_in_a_what_if_is_not_replayed():
    snap = several_devices()
    snap["device_traces"] = snap["device_traces"][:1]
    result = replay(snap, progress=False)
    assert [d.device for d in result.devices] == [0]


def test_an_unknown_generation_is_refused():
    with pytest.raises(ValueError, match="unknown generation"):
        rewrite_as(record(), "1.0")


def test_a_2_0_history_that_is_not_a_list_gets_one_line():
    old = rewrite_as(snapshot_with_pending(), "history")
    block = next(b for s in old["segments"] for b in s["blocks"] if "history" in b)
    block["history"] = 7
    with pytest.raises(SnapshotError, match="'history' is 7"):
        load_snapshot_from(old)


def record_expandable() -> dict:
    """Expandable segments with unmapped holes between mapped ranges, on two streams, in both
    pools, with a pending free: what an expandable run's OOM dump looks like."""
    dev = SimDevice("h100-80gb")
    a = ar.CachingAllocator(dev, "expandable_segments:True")
    side = dev.create_stream()
    big = [a.malloc(30 * MiB) for _ in range(6)]
    small = [a.malloc(4000) for _ in range(5)] + [a.malloc(3000, side)]
    for x in big[1:3] + big[4:5]:
        a.free(x)                      # free ranges inside the mapping ...
    a.empty_cache()                    # ... whose whole pages are unmapped: holes
    a.malloc(7 * MiB, side)
    a.free(small[2])
    shared = a.malloc(25 * MiB)
    a.record_stream(shared, side)
    dev.sleep(side, 10**9)
    a.free(shared)
    return a.snapshot()


def test_a_state_only_file_with_expandable_segments_and_holes_is_verified(tmp_path, capsys):
    snap = state_only(record_expandable())
    segments = [s for s in snap["segments"] if s["is_expandable"]]
    streams = {(s["stream"], s["segment_type"]) for s in segments}
    assert len(segments) > len(streams)                   # several mapped ranges share a reservation
    assert any(b["state"] == "active_pending_free" for s in segments for b in s["blocks"])
    from allocator_ref.caching import check_stats_consistency
    from allocator_ref.trace.engine import Engine
    from allocator_ref.trace.recording import device_recording
    replayer = Engine(device_recording([], snap["segments"], "expandable_segments:True"),
                      progress=False)
    result = replayer.run()
    assert result.final_state_equal is True, result.final_state_diff
    check_stats_consistency(replayer.allocator.segments(record=False), replayer.allocator.memory_stats())
    assert result.peak_allocated == sum(s["allocated_size"] for s in snap["segments"])
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 0 and "state only" in out and ": verified" in out


@pytest.mark.parametrize("generation", ["no-address", "history"])
def test_an_expandable_state_only_file_of_an_older_shape_is_verified(generation, tmp_path, capsys):
    code, out = verify_cli(tmp_path, rewrite_as(state_only(record_expandable()), generation), capsys)
    assert code == 0 and ": verified" in out


def test_an_expandable_segment_that_is_not_whole_pages_is_not_verified(tmp_path, capsys):
    snap = state_only(record_expandable())
    seg = next(s for s in snap["segments"] if s["is_expandable"] and s["blocks"][-1]["state"] == "inactive")
    seg["blocks"][-1]["size"] -= 512           # the mapped range now ends inside a page
    seg["total_size"] -= 512
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 1 and "NOT verified" in out


def _mutate(snap: dict, rng) -> None:
    """One plausible corruption of a segment or block (types stay right: the checks pass or say why)."""
    seg = rng.choice(snap["segments"])
    j = rng.randrange(len(seg["blocks"]))
    block = seg["blocks"][j]
    k = rng.randrange(8)
    if k == 0:
        block["state"] = rng.choice(["active_allocated", "active_pending_free", "inactive"])
    elif k == 1:
        step = rng.choice([-512, 512, 2 * MiB, -2 * MiB])
        block["size"] += step
        seg["total_size"] += step
        for later in seg["blocks"][j + 1:]:
            later["address"] += step
    elif k == 2:
        seg["stream"] = rng.choice([0, 1, 77])
    elif k == 3:
        step = rng.choice([2 * MiB, -2 * MiB, 2**30])
        seg["address"] += step                    # the whole segment moves (it may overlap another)
        for b in seg["blocks"]:
            b["address"] += step
    elif k == 4:
        seg["is_expandable"] = not seg.get("is_expandable")
    elif k == 5:
        seg["segment_type"] = rng.choice(["small", "large"])
    elif k == 6:
        block["requested_size"] = rng.randint(0, block["size"])
    else:
        seg["segment_pool_id"] = rng.choice([(0, 0), (1, 5)])


def test_corrupted_state_only_files_never_get_an_internal_error():
    import random
    rng = random.Random(26)
    bases = [state_only(record_expandable()), state_only(snapshot_with_pending())]
    outcomes = {"refused": 0, "verified": 0, "not verified": 0}
    for _ in range(150):
        snap = copy.deepcopy(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            _mutate(snap, rng)
        try:
            result = replay(snap, verify=True, progress=False)
        except SnapshotError as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
            continue
        outcomes["verified" if result.perfect else "not verified"] += 1
    assert outcomes["refused"] and outcomes["not verified"], outcomes


def test_a_trace_recorded_after_an_expandable_warm_up_replays_exactly(tmp_path, capsys):
    """History switched on mid-run, expandable segments already mapped (the usual way to record:
    after the model is built).  Their pages at the first event are the final ones less what
    the trace mapped, plus what it unmapped; the replay rebuilds them and then matches."""
    dev = SimDevice("h100-80gb")
    a = ar.CachingAllocator(dev, "expandable_segments:True")
    side = dev.create_stream()
    weights = [a.malloc(size) for size in (300 * MiB, 5000, 45 * MiB, 700)]
    scratch = a.malloc(64 * MiB, side)
    a.free(weights.pop(2))                  # a free range inside the mapped pages at the start
    a.record_memory_history(context=None)   # recording starts here
    acts = [a.malloc(size) for size in (30 * MiB, 3000, 90 * MiB)]
    a.free(scratch)
    a.free(acts.pop(0))
    a.empty_cache()                         # unmaps pages that were mapped before recording
    acts.append(a.malloc(50 * MiB, side))
    snap = a.snapshot()
    actions = {e["action"] for e in snap["device_traces"][0]}
    assert {"segment_map", "segment_unmap"} <= actions
    result = replay(snap, verify=True, progress=False)
    assert result.perfect, (result.first_divergence, result.devices[0].final_state_diff)
    assert any("expandable segment(s) mapped at the start" in n for n in result.devices[0].inferred)
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 0 and ": verified" in out


def test_an_expandable_segment_of_an_exabyte_is_a_reported_difference_not_a_hang(tmp_path, capsys):
    snap = state_only(record_expandable())
    seg = max(snap["segments"], key=lambda s: s["address"])     # the last: it overlaps nothing
    assert seg["is_expandable"] and seg["blocks"][-1]["state"] == "inactive"
    seg["blocks"][-1]["size"] += 2**59
    seg["total_size"] += 2**59
    code, out = verify_cli(tmp_path, snap, capsys)
    assert code == 1 and "NOT verified" in out and "expandable segments not rebuilt" in out


def test_many_streams_each_with_a_gpu_of_small_pages_are_refused_before_mapping(tmp_path, capsys):
    """Each range fits its reservation, but together they would map 800,000 pages."""
    GiB = 2**30
    segments = [{"device": 0, "address": 2**40 + i * 100 * GiB, "total_size": 80 * GiB, "stream": i + 1,
                 "segment_type": "small", "is_expandable": True,
                 "blocks": [{"address": 2**40 + i * 100 * GiB, "size": 80 * GiB, "state": "inactive"}]}
                for i in range(20)]
    code, out = verify_cli(tmp_path, {"segments": segments, "device_traces": []}, capsys)
    assert code == 1 and "more than a real run's snapshot shows" in out
