"""The memory doctor on every real PyTorch snapshot in ../shared/traces (skipped when absent).

What it is checked against is read off the trace itself, not the doctor: the recorded
reserved curve is the final segments walked backwards through the trace's segment events;
the recommended lines are replayed again here through the public what-if API.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.memory_doctor.diagnosis import whatif_run
from allocator_ref.memory_doctor.remedies import context_reserve
from allocator_ref.trace.whatif import anchored_replay

GiB = 2**30
PREFIX = "PYTORCH_CUDA_ALLOC_CONF="
ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("ALLOCATOR_REF_TRACES") or ROOT.parent / "shared" / "traces")
PATHS = sorted(TRACES.glob("*.pickle")) if TRACES.is_dir() else []
VERDICTS = {"no-target", "fits", "fewer-retries", "remedy", "less-memory", "shortage", "start-does-not-fit"}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not PATHS, reason=f"no real traces in {TRACES} (../shared/traces; "
                                                   "or set ALLOCATOR_REF_TRACES)")]


def reserved_curve_from_trace(snapshot, device):
    """memory_reserved() after each event: the final segments, walked backwards."""
    events = snapshot["device_traces"][device]
    now = sum(s["total_size"] for s in snapshot["segments"] if s.get("device", 0) == device)
    curve = [0] * len(events)
    for i in range(len(events) - 1, -1, -1):
        curve[i] = now
        e = events[i]
        now += {"segment_alloc": -1, "segment_map": -1, "segment_free": 1, "segment_unmap": 1}.get(e["action"], 0) \
            * e["size"]
    return curve


@pytest.fixture(scope="module", params=PATHS, ids=[p.stem for p in PATHS])
def doctored(request):
    return request.param, ar.doctor(request.param)


def test_the_as_recorded_replay_is_the_recorded_run_event_by_event(doctored):
    path, report = doctored
    d, r = report.diagnosis, report.remedies
    assert d.verified, d.verify_summary.get("first_divergence")
    curve = reserved_curve_from_trace(d.snapshot, d.device)
    assert d.reserved == curve                                 # the frames agree with the trace
    run = whatif_run(d)
    usable = report.capacity.target if report.capacity.known else None
    out = anchored_replay(run.events, run.finals, run.program, config=d.config, usable=usable, index=d.device)
    assert out.positions and [curve[p] for p in out.positions] == out.reserved
    calls = [i for i, e in enumerate(run.events) if e["action"] in ("alloc", "free_requested", "free_completed", "oom")]
    assert out.peak_reserved == max(curve[i] for i in calls) == d.peak_reserved == r.reproduction.peak_reserved
    assert r.reproduced and report.verdict.kind in VERDICTS


def test_capacity_is_inferred_exactly_when_the_run_flushed_or_ran_out(doctored):
    path, report = doctored
    events = report.diagnosis.snapshot["device_traces"][report.diagnosis.device]
    program = whatif_run(report.diagnosis).program
    told = bool(program.ladder_flushes or program.ooms)
    cap = report.capacity
    assert cap.known == told
    if told:
        assert cap.low <= cap.target <= cap.high and report.remedies.target == cap.target
        assert cap.low >= max(report.diagnosis.reserved)        # every cudaMalloc of the run fit
        oom = next((e for e in events if e["action"] == "oom"), None)
        if oom is not None and cap.driver is not None and cap.low <= cap.driver <= cap.high:
            assert cap.target == cap.driver
    else:
        assert report.remedies.target is None and "uncapped" in report.text()


def test_the_stop_check_holds_through_the_command_line(doctored):
    path, report = doctored
    env = dict(os.environ, PYTHONPATH=str(ROOT), ALLOCATOR_REF_DEVICE="sim", MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, "-m", "allocator_ref", "doctor", str(path), "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    j = json.loads(done.stdout.strip().splitlines()[-1])
    recorded = next(t for t in j["remedies"] if t["kind"] == "recorded")
    assert recorded["peak_reserved"] == j["peak_reserved"] == report.diagnosis.peak_reserved


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_device_memory_never_ends_in_an_error(path):
    first = ar.doctor(path, remedies=False)
    d = first.diagnosis
    reserve = context_reserve("h100-80gb")
    between = d.peak_allocated + (d.peak_reserved - d.peak_allocated) // 2
    for usable in (between, 24 * GiB, GiB):
        gib = (usable + reserve) / GiB
        report = ar.doctor(path, device_memory=gib)
        r, v = report.remedies, report.verdict
        assert r.capacity == int(gib * GiB) and v.kind in VERDICTS, (usable, v.text)
        if r.start_held > r.target:
            assert v.kind == "start-does-not-fit" and v.text.startswith("Does not fit before the first event:")
            continue
        if v.kind == "remedy":
            # The recommended line, replayed again here from the run's own program.
            t = v.trial
            assert v.line.startswith(PREFIX) and t.fits and not r.recorded.fits
            if t.allowed is None:
                run = whatif_run(report.diagnosis)
                config = v.line[len(PREFIX):] if t.policy == "caching" else ""
                out = anchored_replay(run.events, run.finals, run.program, config=config, policy=t.policy,
                                      usable=r.target, index=d.device)
                assert out.ooms == 0, v.line
            assert all(not x.fits for x in r.knobs if x.rank < t.rank)
        elif v.kind in ("less-memory", "shortage"):
            assert not r.recorded.fits and not any(x.fits for x in r.knobs)
