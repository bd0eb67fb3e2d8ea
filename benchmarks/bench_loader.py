"""The loader and one verify replay on real files: time and peak memory (RSS), as whole processes.

Four figures (reported, never asserted; tests/test_snapshot_records.py asserts the bound on a
small file):

* ``largest_trace`` -- ``python -m allocator_ref replay FILE --verify`` on the largest shared
  snapshot: wall and CPU seconds, the child's peak RSS, and that over the file's size.
* ``scaled_loads`` -- ``load_recording`` alone (the safe pickle checks, the field checks) on
  files made by copying a real run's device as more ranks (``scale_snapshot.py``), from 1 to
  ``copies`` times: seconds, peak RSS and RSS over the file size, so the memory a file of any
  size needs can be read off the slope.  Below STREAM_BYTES (64 MiB) the trace loads as
  dicts, above it as records (stream_build.py).
* ``big_file`` -- the same scaled to about 1 GB (``BIG_COPIES``): ``load_recording`` alone,
  ``replay --verify`` and ``doctor`` (the doctor stopped after ``DOCTOR_TIMEOUT_S``), each as a
  whole process: seconds and peak RSS over the file, and the peak memory of the tool's whole
  process tree (the doctor verifies devices on forked workers): PSS summed over its processes
  (a page shared copy-on-write counted once) and RSS summed (an upper bound).  Targets: the load's
  peak RSS <= 2x the file; the doctor < 5 min wall with its tree's PSS <= 2x the file (the issue's,
  for a 1 GB snapshot).  Written under the system's temporary folder and
  deleted after.
* ``doctor_vs_replay`` -- bench_engine's ratio of ``doctor`` to one ``replay --verify``.
  Target: <= 2x.  ``doctor_vs_replay_each``: the same, one run of each, on every real trace.
  ``--doctor-only`` measures these two again alone (``doctor_only``), keeping the stored rest.

Skipped without ../shared/traces.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from .bench_engine import doctor_vs_replay
from .common import REPO, RESULTS, trace_paths, write_result

COPIES = (1, 4, 20)          # 20 copies: past STREAM_BYTES (64 MiB), the streaming path
QUICK_COPIES = (1, 2)
BIG_COPIES = 330             # about 1 GB of the 3.1 MiB real run
DOCTOR_TIMEOUT_S = 900
TARGET_RSS_PER_FILE = 2.0
TARGET_DOCTOR_RATIO = 2.0
TARGET_BIG_DOCTOR_S = 300    # the "< 5 min"
MiB = 2**20

LOAD_ONLY = ("import sys; from allocator_ref.trace.recording import load_recording; "
             "r = load_recording(sys.argv[1]); print(len(r.devices))")


# Each tool runs under this small launcher, which reports its child's peak RSS: a child started
# straight from the benchmark (vfork, then exec) is charged the benchmark's own peak RSS at exec
# (the kernel's exec_mmap records the old mm's high-water mark), which made every figure at least
# the size of whatever the benchmark had built before.
LAUNCH = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
          "rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL); wall = time.perf_counter() - t; "
          "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
          "print(rc, wall, u.ru_utime + u.ru_stime, u.ru_maxrss)")


def _measure(argv: list, timeout_s: Optional[int] = None) -> dict:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one child process (stopped after
    ``timeout_s``: coreutils' timeout exits 124, reported as ``exit``), and the peak memory of
    its whole process tree (``tree_peak_*``: the doctor forks workers, whose memory the child's
    own peak RSS leaves out; see ``_tree_memory``)."""
    if timeout_s is not None:
        argv = ["timeout", str(timeout_s)] + argv
    env = dict(os.environ, PYTHONPATH=str(REPO), MPLBACKEND="Agg", ALLOCATOR_REF_MAX_SNAPSHOT_MB="4096")
    peak_pss = peak_rss = 0
    with tempfile.TemporaryFile() as errors, tempfile.TemporaryFile() as output:   # files: never blocks
        child = subprocess.Popen([sys.executable, "-c", LAUNCH, *argv], cwd=REPO, stdout=output,
                                 stderr=errors, env=env)
        while child.poll() is None:            # sampled twice a second until the tree exits
            pss, rss = _tree_memory(child.pid)
            peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
            time.sleep(TREE_SAMPLE_S)
        errors.seek(0)
        err = errors.read().decode(errors="replace")
        output.seek(0)
        out = output.read().decode()
    if child.returncode != 0:
        raise RuntimeError(f"{argv} launcher failed ({child.returncode}): {err[-500:]}")
    rc, wall, cpu, maxrss = out.split()
    if int(rc) not in (0, 1) and not (timeout_s and int(rc) == 124):
        # replay --verify exits 1 when it does not reproduce
        raise RuntimeError(f"{argv} failed ({rc}): {err[-500:]}")
    return {"wall_s": float(wall), "cpu_s": float(cpu), "peak_rss_mib": int(maxrss) / 1024, "exit": int(rc),
            "tree_peak_pss_mib": peak_pss / 1024, "tree_peak_rss_sum_mib": peak_rss / 1024}


TREE_SAMPLE_S = 0.5


def _tree_memory(pid: int) -> tuple:
    """(PSS, RSS) in KiB summed over the tool's processes (the launcher's descendants), read from
    ``/proc/PID/smaps_rollup``.  PSS shares each page among the processes that map it, so forked
    workers reading the parent's pages copy-on-write count them once in all: the memory the tree
    takes.  The RSS sum counts a shared page once per process: an upper bound.  (0, 0) off Linux."""
    pss = rss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
            if p == pid:
                continue                       # the launcher itself: a small Python, not the tool
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
        except (OSError, ValueError):
            continue                           # a process that just exited
    return pss, rss


def _scale(path: Path, copies: int, target: Path) -> int:
    """benchmarks/scale_snapshot.py in a process of its own (its copies never swell this one)."""
    subprocess.run([sys.executable, "-m", "benchmarks.scale_snapshot", str(path), str(copies), str(target)],
                   cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), check=True,
                   stdout=subprocess.DEVNULL)
    return target.stat().st_size


def largest_trace(path: Path) -> dict:
    row = _measure([sys.executable, "-m", "allocator_ref", "replay", str(path), "--verify"])
    size = path.stat().st_size
    row.update(file=path.name, file_mib=size / MiB, rss_over_file=row["peak_rss_mib"] * MiB / size)
    print(f"[loader] replay --verify {path.name} ({size / MiB:.1f} MiB): {row['wall_s']:.2f} s wall, "
          f"{row['cpu_s']:.2f} s cpu, peak RSS {row['peak_rss_mib']:.0f} MiB "
          f"({row['rss_over_file']:.1f}x the file)", flush=True)
    return row


def scaled_loads(path: Path, copies: tuple) -> list:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp:
        for n in copies:
            big = Path(tmp) / f"x{n}.pickle"
            size = _scale(path, n, big)
            row = _measure([sys.executable, "-c", LOAD_ONLY, str(big)])
            row.update(copies=n, file_mib=size / MiB, rss_over_file=row["peak_rss_mib"] * MiB / size,
                       mib_per_s=size / MiB / row["wall_s"])
            rows.append(row)
            print(f"[loader] load {n:>3} copies ({size / MiB:7.1f} MiB): {row['wall_s']:6.2f} s wall "
                  f"{row['cpu_s']:6.2f} s cpu, "
                  f"peak RSS {row['peak_rss_mib']:7.0f} MiB ({row['rss_over_file']:.1f}x the file)", flush=True)
            big.unlink()
    return rows


def big_file(path: Path, copies: int = BIG_COPIES) -> dict:
    """Load, replay --verify and doctor on ``path`` scaled to ``copies`` ranks (about 1 GB)."""
    tools = {"load": [sys.executable, "-c", LOAD_ONLY],
             "replay --verify": [sys.executable, "-m", "allocator_ref", "replay", "--verify"],
             "doctor": [sys.executable, "-m", "allocator_ref", "doctor"]}
    out: dict = {"copies": copies}
    with tempfile.TemporaryDirectory(prefix="bench-loader-big-") as tmp:
        big = Path(tmp) / f"x{copies}.pickle"
        size = _scale(path, copies, big)
        out["file_mib"] = size / MiB
        for name, argv in tools.items():
            row = _measure(argv + [str(big)], DOCTOR_TIMEOUT_S if name == "doctor" else None)
            row.update(rss_over_file=row["peak_rss_mib"] * MiB / size, timed_out=row["exit"] == 124,
                       tree_pss_over_file=row["tree_peak_pss_mib"] * MiB / size,
                       tree_rss_sum_over_file=row["tree_peak_rss_sum_mib"] * MiB / size)
            out[name] = row
            print(f"[loader] {name} {copies} copies ({size / MiB:.0f} MiB): {row['wall_s']:.0f} s wall, "
                  f"{row['cpu_s']:.0f} s cpu, peak RSS {row['peak_rss_mib']:.0f} MiB "
                  f"({row['rss_over_file']:.2f}x the file), process tree: PSS {row['tree_pss_over_file']:.2f}x, "
                  f"RSS summed {row['tree_rss_sum_over_file']:.2f}x"
                  f"{' (stopped: timeout)' if row['timed_out'] else ''}", flush=True)
    return out


def run(quick: bool = False, traces_dir=None, out_dir=None) -> dict:
    paths = trace_paths(traces_dir)
    if not paths:
        return {}
    largest = max(paths, key=lambda p: p.stat().st_size)
    payload: dict = {"quick": quick, "largest_trace": largest_trace(largest),
                     "scaled_loads": scaled_loads(largest, QUICK_COPIES if quick else COPIES)}
    if not quick:
        payload["big_file"] = big_file(largest)
    ratio = doctor_vs_replay(largest, 1 if quick else 3)
    payload["doctor_vs_replay"] = ratio
    # The same ratio on every real trace (one run each in turn): a target met on one file only is luck.
    payload["doctor_vs_replay_each"] = [] if quick else [dict(doctor_vs_replay(p, 1), file=p.name) for p in paths]
    biggest = payload["big_file"]["load"] if not quick else payload["scaled_loads"][-1]
    doctor = payload["big_file"]["doctor"] if not quick else None
    payload["targets"] = {
        # The issue's: a 1 GB snapshot doctored in < 5 min with peak RSS <= 2x the file; the
        # doctor forks workers, so its memory is the process tree's (PSS; the RSS sum is an upper bound).
        "big_doctor_wall_s": {"target": f"< {TARGET_BIG_DOCTOR_S} s wall", "value": None if quick else doctor["wall_s"],
                              "pass": None if quick else (doctor["wall_s"] < TARGET_BIG_DOCTOR_S
                                                          and not doctor["timed_out"])},
        "big_doctor_memory": {"target": f"<= {TARGET_RSS_PER_FILE}x the file (the process tree's PSS)",
                              "value": None if quick else doctor["tree_pss_over_file"],
                              "pass": None if quick else doctor["tree_pss_over_file"] <= TARGET_RSS_PER_FILE},
        "load_rss_over_file": {"target": f"<= {TARGET_RSS_PER_FILE}x the file", "value": biggest["rss_over_file"],
                               "pass": None if quick else biggest["rss_over_file"] <= TARGET_RSS_PER_FILE},
        "doctor_vs_replay_cpu": {"target": f"<= {TARGET_DOCTOR_RATIO}x", "value": ratio["ratio_cpu"],
                                 "pass": None if quick else ratio["ratio_cpu"] <= TARGET_DOCTOR_RATIO},
    }
    write_result("loader", payload, out_dir)
    return payload


def doctor_only(traces_dir=None, out_dir=None, runs: int = 3) -> dict:
    """Only the ``doctor_vs_replay`` figures, measured again and written into the stored loader.json
    (its load and 1 GB figures kept as they were measured): ``python -m benchmarks.bench_loader
    --doctor-only``, for a change to the doctor that leaves the loader alone."""
    paths = trace_paths(traces_dir)
    stored = (Path(out_dir) if out_dir is not None else RESULTS) / "loader.json"
    if not paths or not stored.exists():
        return {}
    payload = {k: v for k, v in json.loads(stored.read_text()).items() if k not in ("benchmark", "machine")}
    largest = max(paths, key=lambda p: p.stat().st_size)
    ratio = payload["doctor_vs_replay"] = doctor_vs_replay(largest, runs)
    payload["doctor_vs_replay_each"] = [dict(doctor_vs_replay(p, 1), file=p.name) for p in paths]
    target = payload["targets"]["doctor_vs_replay_cpu"]
    target["value"], target["pass"] = ratio["ratio_cpu"], ratio["ratio_cpu"] <= TARGET_DOCTOR_RATIO
    write_result("loader", payload, out_dir)
    return payload


if __name__ == "__main__":
    if "--doctor-only" in sys.argv:
        doctor_only()
    else:
        run(quick="--quick" in sys.argv)
