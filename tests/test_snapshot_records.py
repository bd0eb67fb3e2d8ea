"""A big snapshot's trace entries load as compact records (trace_record.py, stream_build.py).

What every tool reads must not change: the streaming path gives records equal to the dicts
the bytes path gives, refuses what it refuses with the same line, and the records read as
dicts do.  The memory they save is measured here in a child process (peak RSS)."""
from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.trace import SnapshotError, save_snapshot
from allocator_ref.trace.recording import load_recording
from allocator_ref.trace.replay import replay
from allocator_ref.trace.trace_record import TraceRecord

REPO = Path(__file__).resolve().parents[1]
MiB = 2**20


def course_run(n: int = 1300) -> dict:
    """A run of more than 1,000 events: pickle.dump writes a trace in batches of 1,000."""
    a = ar.CachingAllocator(ar.SimDevice("h100-80gb"), "")
    a.record_memory_history(max_entries=100_000)
    held = []
    for k in range(n // 2):
        held.append(a.malloc((k % 7 + 1) * MiB + k * 4096))
        if k % 3 == 2:
            a.free(held.pop(0))
    return a.snapshot()


def with_stacks(snap: dict, devices: int = 3) -> dict:
    """``devices`` copies of the run's device, with stacks shaped as PyTorch writes them: each
    event a list of its own holding shared frame records, and some lists shared outright."""
    frames = [{"filename": f"model.py", "line": k, "name": f"f{k}"} for k in range(40)]
    stacks = [frames[k:k + 30] for k in range(5)]
    one_list = list(stacks[0])                       # named again by later batches (pickle's memo)
    out = {k: v for k, v in snap.items() if k not in ("segments", "device_traces")}
    out["segments"], out["device_traces"] = [], []
    for d in range(devices):
        segments, trace = copy.deepcopy((snap["segments"], snap["device_traces"][0]))
        for seg in segments:
            seg["device"] = d
            for record in [seg] + seg["blocks"]:     # not the stack of whoever runs the test
                if "frames" in record:
                    record["frames"] = list(stacks[len(record["blocks"]) % 5 if "blocks" in record else 1])
        out["segments"] += segments
        for k, e in enumerate(trace):
            e["frames"] = one_list if k % 11 == 0 else list(stacks[k % 5])
        out["device_traces"].append(trace)
    return out


@pytest.fixture()
def streaming(monkeypatch):
    import allocator_ref.trace.snapshot as snapshot_module
    monkeypatch.setattr(snapshot_module, "STREAM_BYTES", 0)
    return snapshot_module


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    snap = with_stacks(course_run())
    return snap, dump(snap, tmp_path_factory.mktemp("records") / "run.pickle")


def dump(snap: dict, path: Path) -> Path:
    """As torch's _dump_snapshot writes it (pickle.dump): shared records stay shared."""
    path.write_bytes(pickle.dumps(snap, protocol=4))
    return path


def test_streaming_gives_records_equal_to_the_dicts_of_the_bytes_path(big, streaming):
    snap, path = big
    expected = streaming.loads_snapshot(path.read_bytes(), str(path))
    loaded = streaming.load_snapshot(path)
    assert len(loaded["device_traces"]) == 3 and all(len(t) > 1000 for t in loaded["device_traces"])
    assert all(type(e) is TraceRecord for t in loaded["device_traces"] for e in t)  # every device, every batch
    assert all(type(e) is dict for t in expected["device_traces"] for e in t)
    assert loaded == expected
    assert replay(path, verify=True, progress=False).perfect


def test_one_frames_list_per_stack(big, streaming):
    _, path = big
    loaded = streaming.load_snapshot(path)
    lists = {id(e["frames"]) for t in loaded["device_traces"] for e in t}
    assert len(lists) == 5          # the five stacks (the file holds a list per event)


def test_a_record_reads_as_the_dict_did(big, streaming):
    _, path = big
    d = streaming.loads_snapshot(path.read_bytes())["device_traces"][1][1200]
    e = streaming.load_snapshot(path)["device_traces"][1][1200]
    assert type(e) is TraceRecord
    assert e["action"] == d["action"] and e.get("pool_id") == d["pool_id"] and e.get("nope", 5) == 5
    assert ("addr" in e) and ("device_free" not in e) and list(e) == list(d) and len(e) == len(d)
    assert dict(e) == d and e == d and d == e and {**e} == d and repr(e) == repr(d)
    assert json.loads(json.dumps(dict(e))) == json.loads(json.dumps(d))
    assert copy.deepcopy(e) == d and pickle.loads(pickle.dumps(e)) == d
    with pytest.raises(KeyError):
        e["device_free"]
    with pytest.raises(TypeError):
        e["size"] = 1
    with pytest.raises(TypeError):
        e.size = 1


def test_a_loaded_big_snapshot_saves_as_plain_data(big, streaming, tmp_path):
    snap, path = big
    loaded = streaming.load_snapshot(path)
    again = save_snapshot(loaded, tmp_path / "again.pickle")
    assert streaming.loads_snapshot(again.read_bytes()) == loaded


def refusals(streaming, path) -> tuple:
    """What the bytes path and the streaming path each say when they refuse ``path``."""
    with pytest.raises(SnapshotError) as by_bytes:
        streaming.loads_snapshot(path.read_bytes(), str(path))
    with pytest.raises(SnapshotError) as streamed:
        streaming.load_snapshot(path)
    return str(by_bytes.value), str(streamed.value)


def test_a_bad_entry_is_named_as_the_bytes_path_names_it(streaming, tmp_path):
    snap = with_stacks(course_run(), devices=2)
    snap["device_traces"][1][1100]["size"] = -5            # in the second batch of device 1
    by_bytes, streamed = refusals(streaming, dump(snap, tmp_path / "bad.pickle"))
    assert "device 1 trace entry 1100" in streamed
    assert streamed == by_bytes


def test_an_entry_placed_twice_is_refused_as_the_bytes_path_refuses_it(streaming, tmp_path):
    snap = with_stacks(course_run(), devices=2)
    snap["device_traces"][1][1050] = snap["device_traces"][0][3]     # one record, two places
    by_bytes, streamed = refusals(streaming, dump(snap, tmp_path / "shared.pickle"))
    assert "appears more than once" in streamed
    assert streamed == by_bytes


def test_a_list_of_lists_under_another_key_is_not_taken_for_a_trace(streaming, tmp_path):
    snap = course_run()
    lookalike = {"segments": snap["segments"], "notes": [copy.deepcopy(snap["device_traces"][0])],
                 "device_traces": snap["device_traces"]}
    path = dump(lookalike, tmp_path / "lookalike.pickle")
    loaded = streaming.load_snapshot(path)
    assert type(loaded["notes"][0][0]) is dict             # not a trace: left as the file has it
    assert loaded == streaming.loads_snapshot(path.read_bytes())


def test_torch_npu_workspace_entries_are_set_aside_among_records(streaming, tmp_path):
    from allocator_ref.trace.npu_detect import WORKSPACE_ACTION
    snap = course_run()
    trace = snap["device_traces"][0]
    first = trace[0]
    trace.insert(0, {"action": WORKSPACE_ACTION, "addr": first["addr"], "size": first["size"],
                     "stream": 0, "time_us": 0})
    path = save_snapshot(snap, tmp_path / "npu.pickle")
    by_bytes = load_recording(path.read_bytes())
    streamed = load_recording(path)
    assert streamed.snapshot == by_bytes.snapshot
    assert len(streamed.snapshot["device_traces"][0]) == len(by_bytes.snapshot["device_traces"][0])


def as_torch_writes(entry: dict, k: int) -> dict:
    """A copy of ``entry`` as PyTorch's snapshot holds it: its own frames list and strings, and a
    clock in microseconds since the epoch (``time_us``)."""
    return dict(entry, frames=list(entry["frames"]), time_us=1_748_730_219_596_671 + 7 * k,
                compile_context=entry["compile_context"][:2] + entry["compile_context"][2:])


PEAK = textwrap.dedent("""
    import sys
    import allocator_ref.trace.snapshot as snapshot
    snapshot.STREAM_BYTES = 0
    def kib(field):
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith(field)).split()[1])
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                      # the peak (VmHWM) starts again from now
    except OSError:
        pass                                  # it then counts the imports too: never less
    before = kib("VmRSS:")
    loaded = snapshot.load_snapshot(sys.argv[1])
    print((kib("VmHWM:") - before) * 1024)
""")


def load_growth(path: Path) -> float:
    """Peak RSS the streamed load of ``path`` adds, over the file's size (in a fresh process)."""
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], cwd=REPO, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return int(out.split()[-1]) / path.stat().st_size


REAL = REPO.parent / "shared" / "traces" / "cs336-gpt-ctx128-fullstep.pickle"


@pytest.mark.skipif(not REAL.exists(), reason="needs the shared real traces (../shared/traces)")
def test_a_real_run_scaled_loads_in_at_most_twice_the_file(tmp_path):
    """The issue's bound on a real PyTorch run made four ranks (15 MiB): 4.5x when the trace was
    dicts (benchmarks/bench_loader.py measures it up to 1 GB)."""
    from benchmarks.scale_snapshot import write_scaled
    path = tmp_path / "x4.pickle"
    write_scaled(REAL, 4, path)
    growth = load_growth(path)
    assert growth <= 2.0, f"the load added {growth:.2f}x the file's size"


def test_a_streamed_load_of_a_course_made_run_stays_bounded(tmp_path):
    """A course-made run is leaner per event than PyTorch's files (short stacks, small memo keys),
    so the same records are a larger share of it: 2.6x measured here, 6.9x as dicts."""
    snap = with_stacks(course_run(2600), devices=2)
    for d, trace in enumerate(snap["device_traces"]):        # a trace's worth of memory, as in a real run
        snap["device_traces"][d] = [as_torch_writes(e, k) for k, e in enumerate(trace * 20)]
    path = dump(snap, tmp_path / "big.pickle")
    assert path.stat().st_size > 8 * MiB
    growth = load_growth(path)
    assert growth <= 3.0, f"the load added {growth:.2f}x the file's size"


def test_an_oom_record_has_device_free_and_no_addr():
    from allocator_ref.trace.trace_record import from_fields
    entry = {"action": "oom", "device_free": 1024, "size": 4096, "stream": 0, "time_us": 3,
             "compile_context": "N/A", "user_metadata": "", "pool_id": (0, 0), "later_field": 1}
    e = from_fields(entry, shared={})
    assert e == entry and list(e) == list(entry) and e["device_free"] == 1024 and e["later_field"] == 1
    assert "addr" not in e and e.get("addr") is None
    with pytest.raises(KeyError):
        e["addr"]
