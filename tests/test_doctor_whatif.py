"""The anchored what-if: the doctor's replays start from the run that really happened.

Course-made runs on the simulated GPU, recorded mid-run, with a record_stream free, a user's
empty_cache(), a flush on retry and an out-of-memory error.  What the tests compare with is
read off the recording allocator and the trace itself, never off the doctor:

* the recorded reserved curve is rebuilt from the final segments walked backwards through
  the trace's segment events (no replay involved);
* the GPU's usable memory is the simulated device's own (total minus its context reserve),
  which the snapshot does not carry.
"""
import json

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.memory_doctor.diagnosis import whatif_run
from allocator_ref.memory_doctor.remedies import Remedies, Trial, prescribe
from allocator_ref.memory_doctor.report import DoctorReport
from allocator_ref.trace.whatif import anchored_replay, first_mismatch, program_of

MiB = 2**20
GiB = 2**30


def reserved_curve_from_trace(snapshot, device=0):
    """memory_reserved() after each trace event, from the final segments walked backwards."""
    events = snapshot["device_traces"][device]
    now = sum(s["total_size"] for s in snapshot["segments"] if s.get("device", 0) == device)
    curve = [0] * len(events)
    for i in range(len(events) - 1, -1, -1):
        curve[i] = now
        e = events[i]
        if e["action"] in ("segment_alloc", "segment_map"):
            now -= e["size"]
        elif e["action"] in ("segment_free", "segment_unmap"):
            now += e["size"]
    return curve, now            # and what was reserved before the first event


def user_code_empty_cache(a):
    a.empty_cache()


def recorded_run(big_mib=300):
    """A run on a 1 GiB simulated GPU that the recording catches in the middle of.

    Returns (allocator, snapshot, facts): facts say where each kind of event was made.
    """
    dev = ar.SimDevice("tiny-1gb")
    a = ar.CachingAllocator(dev, "")
    before = [a.malloc(6 * MiB) for _ in range(12)]          # made before recording: mid-run start
    for x in before[::2]:
        a.free(x)
    a.reset_peak_memory_stats()
    a.record_memory_history(max_entries=100_000)
    facts = {}
    side = dev.create_stream()
    x = a.malloc(8 * MiB)
    a.record_stream(x, side)
    dev.sleep(side, 5_000)
    a.free(x)                                                # waits for the side stream
    held = [a.malloc(30 * MiB) for _ in range(8)]
    for y in held:
        a.free(y)
    dev.synchronize()
    user_code_empty_cache(a)                                 # the user's own call
    keep = [a.malloc(40 * MiB) for _ in range(14)]           # 560 MiB stay live ...
    for y in [a.malloc(40 * MiB) for _ in range(6)]:
        a.free(y)                                            # ... 240 MiB cached in whole segments
    facts["retry_before"] = a.memory_stats()["num_alloc_retries"]
    big = a.malloc(260 * MiB)                                # cudaMalloc fails, flush, retry succeeds
    facts["retries"] = a.memory_stats()["num_alloc_retries"] - facts["retry_before"]
    try:
        a.malloc(big_mib * MiB)
        facts["oom"] = False
    except ar.OutOfMemoryError:
        facts["oom"] = True
    del keep, big
    snap = a.snapshot()
    # The user's call made the trace's first releases (nothing before it released memory).
    facts["empty_cache_at"] = next(i for i, e in enumerate(snap["device_traces"][0])
                                   if e["action"] == "segment_free")
    return a, snap, facts


@pytest.fixture(scope="module")
def run():
    a, snap, facts = recorded_run()
    assert facts["retries"] == 1 and facts["oom"], facts     # the run has both kinds of flush
    return a, snap, facts, ar.doctor(snap)


def test_as_recorded_replay_reproduces_the_recorded_curve_event_by_event(run):
    a, snap, facts, report = run
    curve, start = reserved_curve_from_trace(snap)
    r = report.remedies
    assert start > 0                                          # the trace starts mid-run
    assert r.start_held == start
    assert r.reproduced and r.recorded.kind == "recorded"
    # Replay it again here, through the public what-if API, and compare every sample.
    d = report.diagnosis
    program = whatif_run(d).program
    out = anchored_replay(snap["device_traces"][0], snap["segments"], program, config="",
                          usable=report.capacity.target)
    assert len(out.positions) >= sum(e["action"] in ("alloc", "free_requested", "oom")
                                     for e in snap["device_traces"][0])
    assert [curve[p] for p in out.positions] == out.reserved
    assert out.peak_reserved == a.max_memory_reserved() == r.recorded.peak_reserved == d.peak_reserved
    assert out.alloc_retries == a.memory_stats()["num_alloc_retries"] == 2   # the flush and the OOM's own
    assert report.to_json()["num_alloc_retries"] == a.memory_stats()["num_alloc_retries"]


def test_user_empty_cache_is_told_apart_from_the_retry_flush(run):
    a, snap, facts, report = run
    events = snap["device_traces"][0]
    program = whatif_run(report.diagnosis).program
    # The user's call: the releases that start where the test called empty_cache().
    assert program.user_empty_caches == [facts["empty_cache_at"]]
    assert events[facts["empty_cache_at"]]["action"] == "segment_free"
    # The retry: the malloc of 260 MiB, whose releases the allocator made itself; and the OOM's.
    flushed = [events[j]["size"] for j in program.ladder_flushes]
    assert 260 * MiB in flushed and events[program.ooms[0]]["action"] == "oom"
    assert not any(j == facts["empty_cache_at"] for j in program.ladder_flushes)
    # Dropping the user's call from the program makes the "as recorded" replay part from the run;
    # keeping it is what reproduces it.
    d = report.diagnosis
    wrong = program_of(events, d.readings, [], None)
    wrong.actions = [act for act in wrong.actions if act.kind != "empty_cache"]
    out = anchored_replay(events, snap["segments"], wrong, usable=report.capacity.target)
    assert first_mismatch(d.reserved, out) is not None


def test_the_doctor_recovers_a_hidden_capacity(run):
    a, snap, facts, report = run
    usable = a.device.info.total_memory - a.device.info.context_reserve     # 960 MiB, not in the snapshot
    cap = report.capacity
    assert cap.known and cap.low <= usable <= cap.high
    assert cap.high - cap.low < 300 * MiB                    # it is an answer, not "anything"
    assert report.remedies.target == cap.target and cap.low <= cap.target <= cap.high
    assert "this run behaved like a GPU with" in report.text()
    assert all(ok for _, ok in cap.probes if cap.low <= _ <= cap.high)


def test_no_flush_no_oom_means_capacity_unknown_and_uncapped():
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    a.record_memory_history(max_entries=10_000)
    xs = [a.malloc(7 * MiB) for _ in range(20)]
    for x in xs[::2]:
        a.free(x)
    report = ar.doctor(a.snapshot())
    assert not report.capacity.known and report.remedies.target is None
    assert report.remedies.recorded.usable is None               # uncapped
    assert "capacity unknown" in report.text() and "uncapped" in report.text()
    assert report.verdict.kind == "no-target"
    assert report.remedies.recorded.peak_reserved == a.max_memory_reserved()


def test_a_start_larger_than_the_target_is_a_verdict_not_an_error(run, tmp_path, capsys):
    a, snap, facts, report = run
    held = report.remedies.start_held
    assert held > 0
    from allocator_ref.memory_doctor.remedies import context_reserve
    gib = (held - 8 * MiB + context_reserve("h100-80gb")) / GiB   # a GPU, context included, that holds less
    small = ar.doctor(snap, device_memory=gib)
    assert small.verdict.kind == "start-does-not-fit"
    assert small.verdict.text.startswith("Does not fit before the first event:")
    assert "held" in small.verdict.text and small.verdict.line is None
    path = ar.save_snapshot(snap, tmp_path / "run.pickle")
    assert main(["doctor", str(path), "--device-memory", f"{gib:.4f}", "--json"]) == 0
    j = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert j["verdict"] == "start-does-not-fit" and j["start_held"] == held


def test_a_what_if_that_does_not_reproduce_ranks_nothing(run):
    a, snap, facts, report = run
    d = report.diagnosis
    good = whatif_run(d)
    good.program.actions = [act for act in good.program.actions if act.kind != "empty_cache"]
    bad = prescribe(good, d.config, report.remedies.target, report.remedies.capacity, "test",
                    report.capacity.target, live_need=d.live_need)
    assert not bad.reproduced and bad.recommended is None
    assert all(t.skipped for t in bad.trials[1:])
    v = DoctorReport.decide(d, bad)
    at, theirs, ours = bad.reproduction.mismatch
    assert v.kind == "whatif-unverified" and v.line is None
    assert f"trace event {at:,}" in v.text and "no setting is ranked" in v.text
    assert theirs == reserved_curve_from_trace(snap)[0][at] != ours


def test_backend_switch_ranks_after_a_knob_with_the_same_result_and_ties_go_to_the_smaller_change():
    def t(kind, peak, fits=True, order=0):
        return Trial(kind, kind, kind, peak_reserved=peak, fits=fits, order=order,
                     policy="stream_ordered" if kind == "async" else "caching")
    rec = t("recorded", 100, fits=False)
    r = Remedies(90, 100, "test", [rec, t("async", 80), t("max_split", 80, order=2), t("max_split", 80, order=1)])
    assert r.recommended.kind == "max_split" and r.recommended.order == 1
    assert r.lowest.kind == "max_split" and r.lowest.order == 1
    only_async = Remedies(90, 100, "test", [rec, t("async", 80), t("expandable", 95, fits=False)])
    assert only_async.recommended.kind == "async"
    assert only_async.recommended.prediction and "no OOM observers" in only_async.recommended.costs


def test_the_async_row_is_labelled_a_model_prediction_with_its_costs(run):
    report = run[3]
    text = report.text()
    assert "(model prediction)" in text and "shared with every library in the process" in text
    row = next(t for t in report.to_json()["remedies"] if t["kind"] == "async")
    assert row["prediction"] and "no IPC of its memory (getIpcDevPtr)" in row["costs"]


def test_memory_cached_for_a_side_stream_is_named_per_stream():
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    a.record_memory_history(max_entries=10_000)
    side = a.device.create_stream()
    keep = a.malloc(30 * MiB)
    for x in [a.malloc(30 * MiB, stream=side) for _ in range(4)]:
        a.free(x)
    more = a.malloc(30 * MiB)        # the side stream's cache cannot serve stream 0: a new segment, the peak
    report = ar.doctor(a.snapshot())
    text = report.text()
    assert f"stream {side.handle}: 4 segments, 120.0 MiB cached free" in text
    assert "torch.cuda.empty_cache() (or a flush on retry) would give back" in text
    a.free(keep)
    a.free(more)


def test_expandable_runs_explain_unallocated_as_partly_used_pages():
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "expandable_segments:True")
    a.record_memory_history(max_entries=10_000)
    xs = [a.malloc(3 * MiB + 100) for _ in range(9)]
    report = ar.doctor(a.snapshot())
    assert report.remedies.reproduced
    assert report.remedies.recorded.peak_reserved == a.max_memory_reserved()
    assert "partly used pages" in report.text()
    del xs


def test_a_state_only_snapshot_gets_a_diagnosis_of_its_state(run, tmp_path, capsys):
    a, snap, facts, report = run
    state = dict(snap, device_traces=[[]])                   # an OOM observer's dump with history off
    path = ar.save_snapshot(state, tmp_path / "state.pickle")
    assert main(["doctor", str(path), "--json"]) == 0
    j = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    segs = [s for s in snap["segments"] if s.get("device", 0) == 0]
    reserved = sum(s["total_size"] for s in segs)
    allocated = sum(b["size"] for s in segs for b in s["blocks"] if b["state"] == "active_allocated")
    free_blocks = [b["size"] for s in segs for b in s["blocks"] if b["state"] == "inactive"]
    assert j["state_only"] and j["reserved"] == reserved and j["allocated"] == allocated
    assert j["largest_free_block"] == max(free_blocks)
    assert j["stranded"] + j["releasable"] == sum(free_blocks)
    assert j["failed_request"] is None and all(h["proven"] is False for h in j["hints"])
    text = ar.doctor(state).text()
    assert "unproven without a trace" in text and "nothing is replayed" in text
    # With the failed request recorded (a dump whose trace kept only its oom entry), it is named.
    oom = next(e for e in snap["device_traces"][0] if e["action"] == "oom")
    noted = ar.doctor(dict(snap, device_traces=[[oom]]))
    # A trace of one event is read as a state (issue 56: replaying it proved nothing and its
    # what-if table only restated event 0); its oom entry still names the request.
    assert noted.remedies is None and noted.diagnosis.request == 300 * MiB
    from allocator_ref.memory_doctor.state import diagnose_state
    d = diagnose_state(dict(state, device_traces=[[oom]]), "x")
    assert d.request == 300 * MiB > d.largest_free
    # Only a snapshot with nothing in it is refused, in one line.
    empty = ar.save_snapshot({"segments": [], "device_traces": [[]]}, tmp_path / "empty.pickle")
    assert main(["doctor", str(empty)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_several_devices_each_get_a_diagnosis_and_device_n_chooses(tmp_path, capsys):
    snaps = []
    for index, n in ((0, 6), (1, 11)):
        a = ar.CachingAllocator(ar.SimDevice("tiny-1gb", index=index), "")
        a.record_memory_history(max_entries=10_000)
        xs = [a.malloc(7 * MiB) for _ in range(n)]
        for x in xs[::2]:
            a.free(x)
        snaps.append((a, a.snapshot()))
    both = {"segments": [dict(s, device=i) for i, (_, sn) in enumerate(snaps) for s in sn["segments"]],
            "device_traces": [snaps[0][1]["device_traces"][0], snaps[1][1]["device_traces"][1]
                              if len(snaps[1][1]["device_traces"]) > 1 else snaps[1][1]["device_traces"][0]],
            "allocator_settings": snaps[0][1].get("allocator_settings", {})}
    report = ar.doctor(both)
    assert [r.diagnosis.device for r in report.reports] == [1, 0]          # busiest first
    for r, (a, _) in zip(report.reports, [snaps[1], snaps[0]]):
        assert r.remedies.recorded.peak_reserved == a.max_memory_reserved() == r.diagnosis.peak_reserved
    assert report.text().count("Memory doctor:") == 2
    j = report.to_json()
    assert j["device"] == 1 and [x["device"] for x in j["each_device"]] == [1, 0]
    path = ar.save_snapshot(both, tmp_path / "two.pickle")
    assert main(["doctor", str(path), "--device", "0", "--json"]) == 0
    one = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert one["device"] == 0 and "each_device" not in one
    assert one["peak_reserved"] == snaps[0][0].max_memory_reserved()


def test_compare_rows_start_from_the_recorded_run(run, tmp_path, capsys):
    a, snap, facts, report = run
    path = ar.save_snapshot(snap, tmp_path / "run.pickle")
    assert main(["compare", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["config"] == "(as recorded)" and rows[0]["anchored"] and rows[0]["reproduces"]
    assert rows[0]["peak_reserved"] == a.max_memory_reserved()
    assert rows[0]["num_alloc_retries"] == a.memory_stats()["num_alloc_retries"]
    assert all(r["prediction"] == (r["policy"] != "caching") for r in rows)


def test_a_what_if_that_cannot_run_is_reported_on_its_row_not_raised(run, monkeypatch):
    a, snap, facts, report = run
    import allocator_ref.memory_doctor.remedies as remedies_module

    real = remedies_module.anchored_replay

    def refusing(*args, **kwargs):
        if kwargs.get("policy") == "stream_ordered":
            raise RuntimeError("the model refuses this state")
        return real(*args, **kwargs)

    monkeypatch.setattr(remedies_module, "anchored_replay", refusing)
    again = ar.doctor(snap)
    row = next(t for t in again.remedies.trials if t.kind == "async")
    assert row.skipped.startswith("the replay failed: the model refuses this state")
    assert again.remedies.reproduced and again.verdict.kind == report.verdict.kind
    assert "empty_cache() once" in again.text()          # the user's call, counted in the report


def test_a_run_whose_peak_is_what_was_held_at_the_start_says_so():
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    before = [a.malloc(40 * MiB) for _ in range(6)]        # 240 MiB of segments before recording
    for x in before[1:]:
        a.free(x)
    a.record_memory_history(max_entries=10_000)
    for _ in range(3):                                     # every request fits the cached blocks
        xs = [a.malloc(30 * MiB) for _ in range(4)]
        for x in xs:
            a.free(x)
    report = ar.doctor(a.snapshot())
    rec = report.remedies.reproduction
    assert rec.peak_at == -1 and rec.peak_reserved == rec.start_held == 240 * MiB == a.memory_reserved()
    assert rec.fragmentation == 200 * MiB                  # held at the start, 40 MiB of it live
    assert "already held in segments when recording began" in report.verdict.text


def test_a_trace_of_only_snapshot_looks_is_diagnosed_as_state_only(run, tmp_path, capsys):
    # PyTorch appends {'action': 'snapshot'} each time someone looks while history is on; a dump whose
    # trace holds nothing else has no event to replay, so it is the state-only diagnosis, not a replay.
    a, snap, facts, report = run
    looks = [{"action": "snapshot", "addr": 0, "size": a.memory_allocated(), "stream": 0, "frames": []}] * 2
    path = ar.save_snapshot(dict(snap, device_traces=[looks]), tmp_path / "looks.pickle")
    assert main(["doctor", str(path), "--json"]) == 0
    j = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert j["state_only"] is True
    assert j["reserved"] == sum(s["total_size"] for s in snap["segments"] if s.get("device", 0) == 0)



def test_the_retry_count_reads_as_the_flushes_the_capacity_line_names(run):
    """PEAKS says num_alloc_retries (2 here: the flush that served 260 MiB and the OOM's own); the
    capacity line names 1 flush on retry and 1 OOM.  The report must make the two add up."""
    import re
    a, snap, facts, report = run
    text = report.text()
    retries = a.memory_stats()["num_alloc_retries"]
    line = next(l for l in text.splitlines() if "num_alloc_retries" in l)
    said = re.search(r"reproduces its (\d+) flush(?:es)? on retry and (\d+) out-of-memory error", text)
    assert said, text
    flushes, ooms = map(int, said.groups())
    assert flushes + ooms == retries == 2
    assert f"(num_alloc_retries): {retries} (counting the {ooms} request that still ran out of memory" in line
