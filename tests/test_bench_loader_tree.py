"""bench_loader measures the memory of a tool's whole process tree (the doctor forks workers).

The child's own peak RSS leaves its workers out; the benchmark samples PSS (and the RSS sum) over
every process the tool starts.  Here a tool whose two workers hold 64 MiB each at once must be
charged for both (its peak RSS, the largest one process, is not), and the report shows the tree's
columns and the doctor's targets.
"""
from __future__ import annotations

import sys

from benchmarks import bench_loader
from benchmarks import run as bench_run

HOLDS = ("import subprocess, sys; kids = [subprocess.Popen([sys.executable, '-c', "
         "'import time; x = bytearray(64 * 2**20); x[::4096] = b\"1\" * len(x[::4096]); time.sleep(2)']) "
         "for _ in range(2)]; [k.wait() for k in kids]")


def test_a_tools_workers_are_counted():
    row = bench_loader._measure([sys.executable, "-c", HOLDS])
    assert row["exit"] == 0
    assert row["peak_rss_mib"] < 128 <= row["tree_peak_pss_mib"] <= row["tree_peak_rss_sum_mib"]


def test_the_report_shows_the_tree_and_the_doctor_targets():
    tool = {"wall_s": 200.0, "cpu_s": 300.0, "peak_rss_mib": 1900.0, "rss_over_file": 1.5, "timed_out": False,
            "tree_pss_over_file": 1.8, "tree_rss_sum_over_file": 2.4}
    loader = {"largest_trace": {"file": "x.pickle", "file_mib": 3.0, "wall_s": 1.0, "cpu_s": 1.0,
                                "peak_rss_mib": 60.0, "rss_over_file": 20.0},
              "scaled_loads": [], "big_file": {"copies": 330, "file_mib": 1297.0, "load": tool,
                                               "replay --verify": tool, "doctor": tool},
              "doctor_vs_replay": {"runs": 1, "ratio_cpu": 2.0, "ratio_wall": 2.0},
              "targets": {"load_rss_over_file": {"target": "<= 2.0x the file", "value": 1.5, "pass": True},
                          "doctor_vs_replay_cpu": {"target": "<= 2.0x", "value": 2.0, "pass": True},
                          "big_doctor_wall_s": {"target": "< 300 s wall", "value": 200.0, "pass": True},
                          "big_doctor_memory": {"target": "<= 2.0x the file (the process tree's PSS)",
                                                "value": 1.8, "pass": True}}}
    text = bench_run.report({"loader": loader}, False)
    assert "| `doctor` | 200 | 300 | 1,900 | 1.50x | 1.80x | 2.40x |" in text
    assert "`doctor` on the largest, wall seconds: 200.00; target < 300 s wall" in text
