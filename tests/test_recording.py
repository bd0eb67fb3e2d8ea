"""The one loader (trace/recording.py): every entry point takes a path, bytes, a dict, a bare
list of segments or a Recording, checks it the same way, and refuses bad input with one line
naming the source and the field; the doctor loads, checks and rebuilds the start state once.
Course-made snapshots only (no ../shared needed)."""
import importlib
import pickle
import pkgutil

import pytest

import allocator_ref as ar
import allocator_ref.trace as trace_package
from allocator_ref.__main__ import main
from allocator_ref.memory_doctor import doctor, what_if
from allocator_ref.trace import SnapshotError, save_snapshot
from allocator_ref.trace.formats import rewrite_as
from allocator_ref.trace.recording import Recording, load_recording
from allocator_ref.trace.replay import TraceStepper, replay
from allocator_ref.viz.replay_frames import frames_of_snapshot

MiB = 2**20


def recorded_midrun() -> dict:
    """A run recorded from its middle: segments and live tensors exist at the first event."""
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    side = a.device.create_stream()
    before = [a.malloc(3 * MiB) for _ in range(6)]
    a.record_memory_history(max_entries=100_000)
    live = [a.malloc((k % 5 + 1) * MiB) for k in range(30)]
    a.record_stream(live[0], side)
    for x in live[::2] + before[::3]:
        a.free(x)
    a.malloc(7 * MiB)
    return a.snapshot()


def state_only() -> dict:
    snap = recorded_midrun()
    return {"segments": snap["segments"], "device_traces": []}


# ---------------------------------------------------------------- what the loader takes

def test_every_kind_of_input_gives_the_same_recording(tmp_path):
    snap = recorded_midrun()
    path = save_snapshot(snap, tmp_path / "run.pickle")
    loaded = [load_recording(path), load_recording(path.read_bytes()), load_recording(snap)]
    assert [r.source for r in loaded] == [str(path), "<bytes>", "<dict>"]
    events = [[e["action"] for e in r.device(0).events] for r in loaded]
    assert events[0] == events[1] == events[2] and len(events[0]) > 30
    assert all(len(r.device(0).segments) == len(snap["segments"]) for r in loaded)
    assert load_recording(loaded[0]) is loaded[0]           # a Recording comes back as it is
    listed = load_recording(snap["segments"])                # torch.cuda.memory_snapshot()'s list
    assert listed.source == "<list>" and listed.state_only and listed.device(0).events == []


def test_snapshot_entries_are_set_aside_but_indices_point_into_the_file():
    snap = recorded_midrun()
    trace = snap["device_traces"][0]
    trace.insert(3, {"action": "snapshot", "addr": 0, "size": 0, "stream": 0})
    dev = load_recording(snap).device(0)
    assert dev.snapshot_entries == 1 and len(dev.events) == len(trace) - 1
    assert dev.raw_index(3) == 4 and dev.events[3] is trace[4]


def test_the_recorded_peak_reserved_is_what_the_verify_replay_reaches():
    rec = load_recording(recorded_midrun())
    result = replay(rec, verify=True, progress=False)
    assert result.perfect
    assert rec.device(0).peak_reserved == result.devices[0].peak_reserved


def test_a_list_goes_through_doctor_replay_and_the_cli(tmp_path, capsys):
    segments = state_only()["segments"]
    report = doctor(segments)
    assert "state only" in str(report) or report.diagnosis is not None
    result = replay(segments, verify=True, progress=False)
    assert result.perfect and result.source == "<list>"
    path = tmp_path / "list.pickle"
    path.write_bytes(pickle.dumps(segments, protocol=4))
    assert main(["doctor", str(path)]) == 0
    capsys.readouterr()


# ---------------------------------------------------------------- every entry refuses the same way

def one_segment(address=0x7F0000000000, total=2 * MiB, blocks=None) -> dict:
    return {"device": 0, "address": address, "total_size": total, "stream": 0, "segment_type": "large",
            "allocated_size": 0, "active_size": 0,
            "blocks": blocks if blocks is not None else [{"address": address, "size": total, "state": "inactive"}]}


BAD = {
    "bad tiling": ({"segments": [one_segment(blocks=[{"address": 0x7F0000000000, "size": 4 * 2**30,
                                                       "state": "active_allocated"}])],
                    "device_traces": []}, "block 0"),
    "address past 2**64": ({"segments": [one_segment(address=2**64 + 4096)], "device_traces": []}, "address"),
    "negative size": ({"segments": [one_segment(total=-2**70)], "device_traces": []}, "total_size"),
    "overlapping": ({"segments": [one_segment(), one_segment(address=0x7F0000000000 + MiB)],
                     "device_traces": []}, "overlaps"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_entry_point_refuses_what_the_cli_refuses(name, tmp_path, capsys):
    snap, field = BAD[name]
    entries = {"doctor": doctor, "replay": lambda s: replay(s, verify=True, progress=False),
               "what_if": what_if, "stepper": TraceStepper, "frames": frames_of_snapshot,
               "loader": load_recording}
    for entry_name, entry in entries.items():
        with pytest.raises(SnapshotError) as err:
            entry(snap)
        message = str(err.value)
        assert message.startswith("<dict>: ") and field in message and "\n" not in message, (entry_name, message)
    path = tmp_path / "bad.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    assert main(["doctor", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and field in err[0]


def _as_entry(kind: str, snap: dict, tmp_path):
    """The same snapshot handed to the loader as a path, its bytes, the dict, or the bare list of
    segments torch.cuda.memory_snapshot() returns; and the name the error must start with."""
    if kind == "list":
        return snap["segments"], "<list>"
    if kind == "dict":
        return snap, "<dict>"
    data = pickle.dumps(snap, protocol=4)
    if kind == "bytes":
        return data, "<bytes>"
    path = tmp_path / "hostile.pickle"
    path.write_bytes(data)
    return path, str(path)


def bad_history_frame() -> tuple:
    old = rewrite_as(recorded_midrun(), "history")
    block = next(b for s in old["segments"] for b in s["blocks"] if b.get("history"))
    block["history"][0]["frames"] = [{"filename": 7, "line": 1, "name": "f"}]
    return old, "history 0 frame 0: 'filename'"


@pytest.mark.parametrize("kind", ["path", "bytes", "dict", "list"])
@pytest.mark.parametrize("name", sorted(BAD) + ["bad frame in a 2.0 history"])
def test_every_kind_of_entry_refuses_the_same_way_naming_the_source_and_the_field(name, kind, tmp_path):
    snap, field = BAD[name] if name in BAD else bad_history_frame()
    given, source = _as_entry(kind, snap, tmp_path)
    with pytest.raises(SnapshotError) as err:
        load_recording(given)
    message = str(err.value)
    assert message.startswith(source + ": ") and field in message and "\n" not in message, message
    assert message.count(source) == 1, message        # named once, not wrapped twice
    # The same words, whatever the kind: only the source's name differs.
    with pytest.raises(SnapshotError) as as_dict:
        load_recording(snap)
    assert message[len(source):] == str(as_dict.value)[len("<dict>"):], (message, str(as_dict.value))


def test_bad_frames_in_a_2_0_history_are_refused_at_load_naming_the_file_and_field(tmp_path, capsys):
    old = rewrite_as(recorded_midrun(), "history")
    block = next(b for s in old["segments"] for b in s["blocks"] if b.get("history"))
    block["history"][0]["frames"] = [{"filename": 7, "line": 1, "name": "f"}]
    path = tmp_path / "old.pickle"
    path.write_bytes(pickle.dumps(old, protocol=4))
    with pytest.raises(SnapshotError, match=r"old\.pickle: segment \d+ .*block \d+ history 0 frame 0: 'filename'"):
        load_recording(path)
    with pytest.raises(SnapshotError, match=r"^<dict>: .*history 0 frame 0"):
        doctor(old)
    assert main(["doctor", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "old.pickle" in err[0] and "history 0 frame 0" in err[0]


def test_something_that_is_no_snapshot_gets_one_line():
    with pytest.raises(SnapshotError, match="expected a path to a snapshot"):
        load_recording(3.5)


# ---------------------------------------------------------------- the doctor loads once

def _wrap_everywhere(monkeypatch, name: str, calls: list) -> None:
    """Count every call of the function ``name`` however a module of allocator_ref.trace (or the
    doctor) imported it: the count must not depend on which module the code calls it from."""
    modules = [importlib.import_module(f"allocator_ref.trace.{m.name}")
               for m in pkgutil.iter_modules(trace_package.__path__) if m.name != "fetch"]
    modules += [importlib.import_module(f"allocator_ref.memory_doctor.{m}")
                for m in ("diagnosis", "remedies", "capacity", "state")]
    original = None
    for module in modules:
        original = original or getattr(module, name, None)
    assert original is not None

    def counted(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    for module in modules:
        if getattr(module, name, None) is original:
            monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize("given", ["path", "dict"])
def test_the_doctor_checks_and_rebuilds_the_start_once_per_device(given, tmp_path, monkeypatch):
    snap = recorded_midrun()
    source = save_snapshot(snap, tmp_path / "run.pickle") if given == "path" else snap
    checks, rebuilds = [], []
    _wrap_everywhere(monkeypatch, "validate_snapshot", checks)
    _wrap_everywhere(monkeypatch, "infer_initial_state", rebuilds)
    report = doctor(source)
    assert report.diagnosis.verified, report.diagnosis.verify_summary
    assert report.remedies is not None and report.remedies.replays > 1      # several what-ifs ran ...
    assert len(checks) == 1, checks                                        # ... on one check
    assert len(rebuilds) == 1, rebuilds                                    # ... and one rebuilt start


def test_a_recording_is_what_every_tool_takes():
    rec = load_recording(recorded_midrun())
    assert isinstance(rec, Recording)
    assert replay(rec, verify=True, progress=False).perfect
    frames = frames_of_snapshot(rec)
    assert frames.verify_result.perfect and len(frames) == len(rec.device(0).events)
    assert doctor(rec).diagnosis.recording is rec
    from allocator_ref.viz.timeline import memory_curves
    curves, from_dict = memory_curves(rec), memory_curves(rec.snapshot)
    assert len(curves.reserved) > 30 and list(curves.reserved) == list(from_dict.reserved)
