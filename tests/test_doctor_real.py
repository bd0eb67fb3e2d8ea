"""The memory doctor on every real PyTorch snapshot in ../shared/traces (skipped when absent).

Its verdicts and recommended lines are checked against replays made here with the plain
``ar.replay`` API (not the doctor's own helpers): the recommended settings must replay
without an out-of-memory error on the target, the recorded ones must not.
"""
import os
from pathlib import Path

import pytest

import allocator_ref as ar

GiB = 2**30
PREFIX = "PYTORCH_CUDA_ALLOC_CONF="
TRACES = Path(os.environ.get("ALLOCATOR_REF_TRACES") or Path(__file__).resolve().parents[1].parent / "shared" / "traces")
PATHS = sorted(TRACES.glob("*.pickle")) if TRACES.is_dir() else []

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not PATHS, reason=f"no real traces in {TRACES} (../shared/traces; "
                                                   "or set ALLOCATOR_REF_TRACES)")]


def one_device_with_failed_requests(snapshot, device):
    """The device's trace, with each request the GPU refused (its ``oom`` entry) asked again."""
    traces = [[] for _ in snapshot["device_traces"]]
    for k, e in enumerate(snapshot["device_traces"][device]):
        if e["action"] == "oom":
            e = {"action": "alloc", "addr": (1 << 63) + 512 * (k + 1), "size": e["size"], "stream": e.get("stream", 0)}
        traces[device].append(e)
    return dict(snapshot, device_traces=traces,
                segments=[s for s in snapshot["segments"] if s.get("device", 0) == device])


def ooms(snapshot, device, config, capacity, policy="caching"):
    result = ar.replay(snapshot, config=config, policy=policy, device_memory=capacity, progress=False)
    return next(d for d in result.devices if d.device == device).ooms_raised


def check_verdict(report):
    """The verdict agrees with the doctor's own trials, and with replays made here."""
    d, r, v = report.diagnosis, report.remedies, report.verdict
    assert d.verified, d.verify_summary.get("first_divergence")
    snap = one_device_with_failed_requests(d.snapshot, d.device)
    if r.target is None:
        assert v.kind == "no-target" and v.line is None
        return
    recorded_ooms = ooms(snap, d.device, d.config, r.capacity)
    assert (recorded_ooms == 0) == bool(r.recorded.fits)
    if v.kind == "fits":
        assert recorded_ooms == 0
    elif v.kind == "remedy":
        assert recorded_ooms > 0 and v.line.startswith(PREFIX) and v.trial.fits
        assert min((t for t in r.trials if t.fits and not t.skipped), key=lambda t: t.rank) is v.trial
        if v.trial.allowed is None:        # a settings line alone: replay it here
            config = v.line[len(PREFIX):]
            assert ooms(snap, d.device, config, r.capacity, v.trial.policy) == 0, v.line
    else:
        assert v.kind == "less-memory" and v.line is None
        assert not any(t.fits for t in r.trials if not t.skipped)
        assert recorded_ooms > 0
        assert ooms(snap, d.device, d.config, r.capacity + v.reduce_by) == 0


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_doctor_on_a_real_trace(path):
    report = ar.doctor(path)
    d = report.diagnosis
    events = d.snapshot["device_traces"][d.device]
    assert len(d.frames) == len(events)                         # the whole trace was played
    assert [e["action"] for e in d.frames.events] == [e["action"] for e in events]
    # Peaks equal those of a plain verified replay of the same device.
    plain = ar.replay(path, verify=True, progress=False)
    dev = next(x for x in plain.devices if x.device == d.device)
    assert d.peak_reserved == dev.peak_reserved
    assert d.verified == plain.perfect and d.verify_summary["allocs_exact"] == dev.allocs_exact
    assert d.peak_allocated == dev.peak_allocated
    assert sum(h.free + h.pending for h in d.holdings) == d.unallocated_at_peak
    has_oom = any(e["action"] == "oom" for e in events)
    assert (d.oom is not None) == has_oom
    if has_oom:
        assert report.remedies.target == d.oom.reserved + d.oom.device_free
        assert report.remedies.recorded.ooms >= 1              # the replay runs out of memory there too
    check_verdict(report)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_doctor_on_a_real_trace_squeezed_onto_a_smaller_gpu(path):
    first = ar.doctor(path, remedies=False)
    d = first.diagnosis
    # A GPU between the live peak and the reserved peak: fragmentation decides whether it fits.
    from allocator_ref.memory_doctor.remedies import context_reserve
    usable = d.peak_allocated + (d.peak_reserved - d.peak_allocated) // 2
    gib = (usable + context_reserve("h100-80gb")) / GiB
    report = ar.doctor(path, device_memory=gib)
    assert report.remedies.capacity == int(gib * GiB)
    check_verdict(report)
