"""A max_split_size_mb row taken from the recorded replay says what its own replay says.

memory_doctor/unchanged.py skips the replay of ``max_split_size_mb:X`` when the replay of the
recorded settings made no segment and refused no request of ``X`` or more.  Each test runs
the doctor twice, once as it is and once with every row replayed (``answered_by`` answering
None), and compares every row's JSON but its seconds: nothing here is copied from the doctor.
"""
import os
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.memory_doctor import examples, remedies

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("ALLOCATOR_REF_TRACES") or ROOT.parent / "shared" / "traces")
REAL = [TRACES / name for name in ("cs336-gpt-ctx128-forward.pickle", "cs336-medium-128-training.pickle")]


def rows(report) -> list:
    return [{k: v for k, v in t.to_json().items() if k != "seconds"} for t in report.remedies.trials]


def both_ways(monkeypatch, snapshot, **kwargs):
    """(rows as the doctor answers them, rows with every one replayed, how many were not replayed)."""
    taken = []
    answered_by = remedies.answered_by

    def counting(*args):
        base = answered_by(*args)
        taken.append(base is not None)
        return base
    monkeypatch.setattr(remedies, "answered_by", counting)
    fast = rows(ar.doctor(snapshot, **kwargs))
    monkeypatch.setattr(remedies, "answered_by", lambda *args: None)
    return fast, rows(ar.doctor(snapshot, **kwargs)), sum(taken)


def test_fragmentation_run_rows_are_the_replayed_ones(monkeypatch):
    # 20 MiB segments, 6 MiB tensors and a refused 200 MiB request: 512 and 256 are below
    # nothing in the run, 128 is below the refused request, so it is replayed.
    fast, slow, skipped = both_ways(monkeypatch, examples.fragmentation_run())
    assert fast == slow
    assert skipped == 2


def test_a_segment_at_the_threshold_is_replayed(monkeypatch):
    # A 600 MiB segment, cached, then 6 MiB tensors: with no max_split_size they are cut from it,
    # with max_split_size_mb:512 or less they may not be (get_free_block), so each row differs.
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"))
    a.record_memory_history(max_entries=10_000)
    a.free(a.malloc(600 * 2**20))
    small = [a.malloc(6 * 2**20) for _ in range(10)]
    for x in small[::2]:
        a.free(x)
    fast, slow, skipped = both_ways(monkeypatch, a.snapshot())
    assert fast == slow
    assert skipped == 0
    peaks = {row["change"]: row["peak_reserved"] for row in fast}
    assert peaks["max_split_size_mb:512"] != peaks[""]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_real_runs_rows_are_the_replayed_ones(monkeypatch, path):
    if not path.exists():
        pytest.skip(f"no {path} (../shared/traces)")
    fast, slow, skipped = both_ways(monkeypatch, str(path))
    assert fast == slow
    assert skipped >= 1
