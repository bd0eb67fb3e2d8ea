"""Every start state: a ring-buffer trace from a large GPU whose first event lands inside
expandable segments that existed before recording gets a what-if whose "as recorded" row
reproduces the recorded peak, and a doctor verdict.

Course-made runs (no ../shared needed): a 180 GB GPU, expandable segments, 121 GiB of weights
held in one reservation and a second reservation (the small pool, or another stream) before
history recording starts with a short ring buffer."""
import pytest

import allocator_ref as ar
from allocator_ref.memory_doctor import doctor, what_if
from allocator_ref.trace.recording import load_recording
from allocator_ref.trace.replay import replay

MiB, GiB = 2**20, 2**30
LARGE_GPU = "h100-80gb@193273528320"          # a 180 GiB GPU (a B200-sized one)


def ring_buffer_run(second: str, entries: int = 60) -> dict:
    a = ar.CachingAllocator(ar.SimDevice(LARGE_GPU), "expandable_segments:True")
    side = a.device.create_stream()
    weights = [a.malloc(GiB) for _ in range(121)]                  # one reservation, 121 GiB mapped
    if second == "small pool":
        small = [a.malloc(4096) for _ in range(100)]               # the small pool's reservation
    else:
        other = [a.malloc(GiB, stream=side) for _ in range(3)]     # another stream's reservation
    a.record_memory_history(max_entries=entries)                  # the oldest events fall out
    activations = []
    for step in range(40):
        activations.append(a.malloc((step % 5 + 1) * 256 * MiB))
        if len(activations) > 6:
            a.free(activations.pop(0))
    return a.snapshot()


@pytest.mark.parametrize("second", ["small pool", "another stream"])
def test_the_as_recorded_row_reproduces_the_recorded_peak(second):
    snap = ring_buffer_run(second)
    first = snap["device_traces"][0][0]
    assert sum(1 for s in snap["segments"] if s["is_expandable"]) == 2
    assert first["action"] != "segment_map"            # the trace starts mid-run, inside the reservations
    rec = load_recording(snap)
    recorded = rec.device(0).peak_reserved
    assert recorded > 121 * GiB
    assert replay(rec, verify=True, progress=False).perfect
    rows, _capacity = what_if(rec)
    as_recorded = rows[0]
    assert as_recorded.kind == "recorded" and not as_recorded.skipped, as_recorded.skip_reason
    assert as_recorded.peak_reserved == recorded and as_recorded.mismatch is None
    assert all(not r.skipped for r in rows), [r.skip_reason for r in rows]


def test_the_doctor_gives_a_verdict_on_it():
    text = str(doctor(ring_buffer_run("small pool")))
    assert "Reproduced: yes" in text
    assert "VERDICT" in text and "landed elsewhere" not in text and "replay failed" not in text
