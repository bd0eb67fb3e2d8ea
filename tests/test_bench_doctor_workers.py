"""benchmarks/bench_doctor_workers.py runs (quick mode), finds the same report on one worker and two,
and its figures reach the report; no timing is asserted."""
from benchmarks import bench_doctor_workers
from benchmarks.run import report


def test_quick_run_reports_both_timings_and_the_same_report(tmp_path):
    data = bench_doctor_workers.run(quick=True, out_dir=tmp_path)
    assert data["same_report"] and data["files"] == 4
    assert (tmp_path / "doctor_workers.json").is_file()
    text = report({"doctor_workers": data}, quick=True)
    assert f"{data['one_worker_s']:.2f} s" in text and f"{data['two_workers_s']:.2f} s" in text
