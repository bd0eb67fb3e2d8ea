"""A backlog of record_stream frees costs every event the same (issue: 16,000 pending frees took
``replay --verify`` 37 s, the doctor 51 s on a 348 KB trace).  Work is counted, never timed: the
figures are in benchmarks/bench_engine.py (``make bench``)."""
import pytest

from allocator_ref.memory_doctor import doctor
from allocator_ref.trace import replay_device
from allocator_ref.trace.recording import load_recording
from allocator_ref.trace.replay import replay
from benchmarks.gen_pending_frees import pending_frees_snapshot


def most_pending(events: list) -> int:
    pending, most = set(), 0
    for e in events:
        if e["action"] == "free_requested":
            pending.add(e["addr"])
        elif e["action"] == "free_completed":
            pending.discard(e["addr"])
        most = max(most, len(pending))
    return most


def test_the_generated_trace_has_its_backlog_and_replays_exactly():
    rec = load_recording(pending_frees_snapshot(400))
    assert most_pending(rec.device(0).events) >= 400
    result = replay(rec, verify=True, progress=False)
    assert result.perfect, result.devices[0].first_divergence


def event_queries(frees: int, monkeypatch, run) -> int:
    """How many times the replay's events were asked "are you done?" (process_events asks each
    stream's queue until one says no): the work a backlog costs."""
    calls = []
    original = replay_device.ManualEvent.query

    def counted(self):
        calls.append(1)
        return original(self)

    rec = load_recording(pending_frees_snapshot(frees))
    monkeypatch.setattr(replay_device.ManualEvent, "query", counted)
    try:
        run(rec)
    finally:
        monkeypatch.setattr(replay_device.ManualEvent, "query", original)
    return len(calls)


@pytest.mark.parametrize("tool", ["replay --verify", "doctor"])
def test_pending_frees_cost_linear_work(tool, monkeypatch):
    run = (lambda rec: replay(rec, verify=True, progress=False)) if tool == "replay --verify" else doctor
    small, large = (event_queries(n, monkeypatch, run) for n in (300, 1200))
    # 4x the frees must not cost much more than 4x the work (one guard stream per pending free
    # made it 16x: every malloc asked every pending free's stream).
    assert large <= 4.5 * max(small, 1), (small, large)


@pytest.mark.slow
def test_the_engine_benchmark_runs_and_writes_its_figures(tmp_path):
    import json

    from benchmarks import bench_engine
    payload = bench_engine.run(quick=True, out_dir=tmp_path)
    data = json.loads((tmp_path / "engine.json").read_text())
    assert data["benchmark"] == "engine" and set(payload["targets"]) == {"pending_frees_growth",
                                                                         "doctor_vs_replay_cpu"}
    rows = data["pending_frees"]["rows"]
    assert {r["tool"] for r in rows} == {"replay --verify", "doctor"}
    assert all(r["verified"] for r in rows if r["tool"] == "replay --verify")
