"""benchmarks/bench_doctor.py runs (quick mode) and its figures reach the report; no timing is asserted."""
from benchmarks import bench_doctor
from benchmarks import run as bench_run


def test_quick_doctor_benchmark_without_traces(tmp_path):
    data = bench_doctor.run(quick=True, traces_dir=tmp_path / "none", out_dir=tmp_path)
    assert (tmp_path / "doctor.json").is_file()
    assert data["frames"] == data["events"] >= 2000 and "synthetic" in data["frames_source"]
    assert data["full_reads"] == 0                       # no expandable segments: never a whole snapshot
    assert 0 < data["jump_ms_median"] <= data["jump_ms_max"]
    assert data["doctor_fullstep_s"] is None and "no cs336" in data["skipped_doctor"]
    assert set(data["targets"]) == {"doctor_fullstep_s", "frames_fullstep_s", "jump_ms_max"}
    assert data["targets"]["doctor_fullstep_s"]["pass"] is None
    assert isinstance(data["targets"]["jump_ms_max"]["pass"], bool)
    assert data["big_reproduced"] and data["big_peak_reserved"] > 141 * 2**30     # more than every profile holds
    assert data["big_simulated_gpu"].startswith("h100-80gb@")
    report = bench_run.report({"doctor": data}, quick=True)
    assert "Memory doctor and whole-trace frames" in report and "jump to any frame" in report
    assert "150 GiB expandable run" in report
