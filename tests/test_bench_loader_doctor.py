"""``python -m benchmarks.bench_loader --doctor-only``: the doctor/verify ratios measured again and
written into the stored loader.json, the load and 1 GB figures kept as measured.  No timing is asserted."""
import json
import pickle

from benchmarks import bench_loader
from test_doctor_diff import training


def test_doctor_only_rewrites_the_ratios_and_keeps_the_rest(tmp_path):
    traces, out = tmp_path / "traces", tmp_path / "results"
    traces.mkdir()
    out.mkdir()
    (traces / "course.pickle").write_bytes(pickle.dumps(training(2, steps=1, layers=2)[1]))
    kept = {"largest_trace": {"file": "kept"}, "scaled_loads": [{"copies": 1}], "big_file": {"copies": 330},
            "doctor_vs_replay": {"ratio_cpu": -1.0}, "doctor_vs_replay_each": [],
            "targets": {"load_rss_over_file": {"value": 1.5, "pass": True},
                        "doctor_vs_replay_cpu": {"target": "<= 2.0x", "value": -1.0, "pass": None}}}
    (out / "loader.json").write_text(json.dumps({"benchmark": "loader", "machine": {}, **kept}))
    bench_loader.doctor_only(traces, out, runs=1)
    data = json.loads((out / "loader.json").read_text())
    for key in ("largest_trace", "scaled_loads", "big_file"):
        assert data[key] == kept[key]
    assert data["targets"]["load_rss_over_file"] == kept["targets"]["load_rss_over_file"]
    ratio = data["doctor_vs_replay"]
    assert ratio["runs"] == 1 and ratio["ratio_cpu"] == ratio["doctor_cpu_s"] / ratio["replay_cpu_s"] > 0
    assert [e["file"] for e in data["doctor_vs_replay_each"]] == ["course.pickle"]
    target = data["targets"]["doctor_vs_replay_cpu"]
    assert target["value"] == ratio["ratio_cpu"] and target["pass"] == (ratio["ratio_cpu"] <= 2.0)
