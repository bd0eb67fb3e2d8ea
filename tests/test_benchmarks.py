"""The benchmarks run (quick mode, in-process) and write the files they promise.

No timing is asserted here: the targets are reported by ``make bench``.
"""
from __future__ import annotations

import json

import pytest

from benchmarks import bench_fragmentation, bench_gpu, bench_replay, bench_warm_path
from benchmarks import run as bench_run
from benchmarks.common import TRACES

from conftest import require_gpu

MACHINE_KEYS = {"platform", "cpu_count", "python", "date"}


def _load(path):
    data = json.loads(path.read_text())
    assert MACHINE_KEYS <= set(data["machine"]), data["machine"]
    return data


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    # Our four benchmarks only: bench_viz.py belongs to (and is tested by) the viz work.
    results = bench_run.main(["--quick", "--out", str(out), "--only", "warm_path", "replay",
                              "fragmentation", "gpu"])
    return out, results


def test_quick_run_writes_every_result_and_the_report(quick_run):
    out, results = quick_run
    for name in ("warm_path", "replay", "fragmentation", "gpu"):
        assert (out / f"{name}.json").is_file(), name
        assert _load(out / f"{name}.json")["benchmark"] == name
    report = (out / "REPORT.md").read_text()
    assert "Warm path" in report and "Fragmentation" in report and "Replay" in report


def test_warm_path_keys(quick_run):
    data = _load(quick_run[0] / "warm_path.json")
    for key in ("ratio_to_floor", "growth_100_to_100000", "rows", "targets", "counts"):
        assert key in data
    assert data["ratio_to_floor"] > 0 and data["growth_100_to_100000"] > 0
    assert set(data["targets"]) == {"ratio_to_floor", "growth_100_to_100000"}
    assert all(isinstance(t["pass"], bool) for t in data["targets"].values())
    for row in data["rows"]:
        assert {"cached_blocks", "pair_ns", "floor_ns", "ratio_to_floor", "floor_internal_ns",
                "bookkeeping_ns"} <= set(row)
        assert row["bookkeeping_ns"] == row["pair_ns"] - row["floor_internal_ns"]
        assert row["pool_free_blocks"] == row["cached_blocks"] + 1   # the holes + the big tail


def test_replay_keys(quick_run):
    data = _load(quick_run[0] / "replay.json")
    assert "replay_fullstep_s" in data and "traces" in data
    heavy = data["stream_heavy"]                  # generated: measured with or without real traces
    assert heavy["events"] >= 10_000 and heavy["streams"] == 1_000 and heavy["perfect"]
    assert heavy["allocs_exact"] == heavy["allocs"] > 0 and heavy["verify_s"] > 0
    if not TRACES.is_dir():
        pytest.skip(f"no real traces under {TRACES}")
    assert data["replay_fullstep_s"] is not None
    for row in data["traces"]:
        assert {"trace", "events", "verify_s", "verify_events_per_s", "allocs_exact"} <= set(row)
        assert row["allocs_exact"] == row["allocs"], row       # verified replays stay exact


def test_fragmentation_keys(quick_run):
    data = _load(quick_run[0] / "fragmentation.json")
    designs = [d["name"] for d in data["designs"]]
    assert designs == ["native", "expandable", "stream_ordered", "bfc", "direct", "npu"]   # npu: torch_npu's design (issue 54)
    assert "generated-dynamic-shape" in data["table"]
    for workload, row in data["table"].items():
        assert set(row) == set(designs)
        for name, ratio in row.items():
            assert ratio is None or ratio >= 0.99, (workload, name, ratio)
    assert data["table"]["generated-dynamic-shape"]["direct"] == pytest.approx(1.0)


def test_gpu_benchmark_skips_with_a_reason_here(quick_run):
    data = _load(quick_run[0] / "gpu.json")
    if not bench_gpu._probe()[0]:
        assert data["skipped"].startswith("no GPU")
    else:
        assert data["skipped"] is None


def test_missing_traces_are_skipped_with_a_message(tmp_path, capsys):
    data = bench_replay.run(quick=True, traces_dir=tmp_path / "none", out_dir=tmp_path)
    assert data["traces"] == [] and data["replay_fullstep_s"] is None
    assert "no real traces" in capsys.readouterr().out
    frag = bench_fragmentation.run(quick=True, traces_dir=tmp_path / "none", out_dir=tmp_path)
    assert list(frag["table"]) == ["generated-dynamic-shape"]


def test_warm_path_small_counts(tmp_path):
    data = bench_warm_path.run(quick=True, counts=(20, 200), out_dir=tmp_path)
    assert data["counts"] == [20, 200] and len(data["rows"]) == 2


def test_generated_workload_is_seeded_and_balanced():
    a = bench_fragmentation.dynamic_shape_workload(seed=3, steps=3)
    assert a == bench_fragmentation.dynamic_shape_workload(seed=3, steps=3)
    assert a != bench_fragmentation.dynamic_shape_workload(seed=4, steps=3)
    mallocs = {op[1] for op in a if op[0] == "malloc"}
    frees = [op[1] for op in a if op[0] == "free"]
    assert len(frees) == len(set(frees)) and set(frees) < mallocs   # weights stay live


@pytest.mark.gpu
def test_gpu_benchmark_runs_on_a_gpu(tmp_path):
    require_gpu()
    data = bench_gpu.run(quick=True, out_dir=tmp_path)
    assert data["skipped"] is None
    for name in ("cudaMalloc", "reference", "cupy_pool", "cudaMallocAsync"):
        assert name in data["allocators"]
    assert "error" not in data["allocators"]["reference"], data["allocators"]["reference"]


def test_only_keeps_the_other_stored_results_in_the_report(quick_run):
    # A rerun of one benchmark rewrites REPORT.md: the others' sections stay, read from their files.
    out, _ = quick_run
    bench_run.main(["--quick", "--out", str(out), "--only", "fragmentation"])
    report = (out / "REPORT.md").read_text()
    assert "Warm path" in report and "Replay" in report and "Fragmentation" in report
