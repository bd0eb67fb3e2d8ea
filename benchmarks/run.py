"""Run every benchmark: ``python -m benchmarks.run [--quick] [--out DIR] [--only NAME ...]``.

Writes ``<out>/<name>.json`` (with the machine description) for each benchmark
and ``<out>/REPORT.md``, a short table with the targets marked pass/fail.
``--quick`` uses small sizes (CI: a few seconds); the targets are meant for the
full run (``make bench``), and are reported, never asserted.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import time
from pathlib import Path
from typing import Optional, Sequence

from . import (bench_doctor, bench_doctor_workers, bench_engine, bench_fragmentation, bench_gpu, bench_loader, bench_predict, bench_replay,
               bench_warm_path)
from .common import RESULTS, machine, write_result

BENCHMARKS = {
    "warm_path": bench_warm_path.run,
    "replay": bench_replay.run,
    "fragmentation": bench_fragmentation.run,
    "gpu": bench_gpu.run,
    "doctor": bench_doctor.run,
    "doctor_workers": bench_doctor_workers.run,
    "predict": bench_predict.run,
    "engine": bench_engine.run,
    "loader": bench_loader.run,
}


def _viz_runner():
    """``run`` of benchmarks/bench_viz.py (another engineer's), when that module exists."""
    try:
        mod = importlib.import_module("benchmarks.bench_viz")
    except ImportError:
        return None
    return getattr(mod, "run", None)


def _fmt(v, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _mark(ok) -> str:
    return "n/a" if ok is None else ("pass" if ok else "FAIL")


def report(results: dict, quick: bool) -> str:
    m = machine()
    lines = [f"# Benchmark report{' (quick mode: small sizes, targets not meaningful)' if quick else ''}", "",
             f"Machine: {m['platform']}, {m['cpu_count']} CPUs, Python {m['python']}, {m['date']}; "
             f"load average (1 min) {m.get('load_average_1min')} when the report was written "
             "(each result file records its own).", ""]
    load, cpus = m.get("load_average_1min"), m.get("cpu_count") or 1
    if load is not None and load > cpus:
        lines += [f"**The machine was shared and loaded** (load average {load} on {cpus} CPUs): every timing "
                  "below is slower than the same code on an idle machine, by about the ratio of load to CPUs.", ""]
    w = results.get("warm_path")
    if w:
        lines += ["## Warm path: caching malloc+free vs SortedList floor", "",
                  "The floor is SortedList's public bisect_left + remove + add; the internal floor is the same "
                  "three steps as BlockPool takes them (lower_bound on its internal lists, erase at that "
                  "position, add). Pair minus internal floor = the allocator's own bookkeeping.", "",
                  "| cached blocks | malloc+free (us) | floor (us) | ratio | internal floor (us) | bookkeeping (us) |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in w["rows"]:
            internal = r.get("floor_internal_ns")
            extra = (f"{internal / 1e3:.2f} | {r['bookkeeping_ns'] / 1e3:.2f}" if internal is not None else "n/a | n/a")
            lines.append(f"| {r['cached_blocks']:,} | {r['pair_ns'] / 1e3:.2f} | {r['floor_ns'] / 1e3:.2f} "
                         f"| {r['ratio_to_floor']:.2f}x | {extra} |")
        t = w["targets"]
        lines += ["", f"- ratio_to_floor (largest N) = {w['ratio_to_floor']:.2f}x, target <= 3x: "
                      f"**{_mark(t['ratio_to_floor']['pass'])}**",
                  f"- growth_100_to_100000 = {w['growth_100_to_100000']:.2f}x, target <= 1.5x: "
                  f"**{_mark(t['growth_100_to_100000']['pass'])}** (floor itself grew "
                  f"{w['floor_growth']:.2f}x)", ""]
    r = results.get("replay")
    if r:
        lines += ["## Replay throughput (real traces)", ""]
        if r["traces"]:
            lines += ["| trace | events | verify (s) | events/s | plain (s) | exact allocs |",
                      "|---|---:|---:|---:|---:|---:|"]
            for t in r["traces"]:
                lines.append(f"| {t['trace']} | {t['events']:,} | {t['verify_s']:.3f} | "
                             f"{t['verify_events_per_s']:,.0f} | {t['plain_s']:.3f} | "
                             f"{t['allocs_exact']}/{t['allocs']} |")
            lines += ["", f"- replay_fullstep_s = {_fmt(r['replay_fullstep_s'], '.3f')} s, target < 1 s: "
                          f"**{_mark(r['targets']['replay_fullstep_s']['pass'])}**", ""]
        else:
            lines += [f"Skipped: {r['skipped']}", ""]
        h = r.get("stream_heavy")
        if h:
            mark = _mark(r["targets"]["stream_heavy_verify_s"]["pass"])
            lines += ["Stream-heavy trace (generated, `stream_heavy_snapshot`: a stream per few allocations, "
                      "every segment given back each round):", "",
                      f"- {h['events']:,} events over {h['streams']:,} streams: verify {h['verify_s']:.3f} s "
                      f"({h['verify_events_per_s']:,.0f} events/s), plain {h['plain_s']:.3f} s, exact allocs "
                      f"{h['allocs_exact']}/{h['allocs']}; target < 5 s for 100,000 events over 10,000 "
                      f"streams: **{mark}**", ""]
    f = results.get("fragmentation")
    if f:
        names = [d["name"] for d in f["designs"]]
        lines += ["## Fragmentation: peak reserved / peak allocated", "",
                  "| workload | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for wname, row in f["table"].items():
            lines.append(f"| {wname} | " + " | ".join(_fmt(row[n], ".3f") for n in names) + " |")
        lines.append("")
    g = results.get("gpu")
    if g:
        lines += ["## GPU: CuPy workload per allocator", ""]
        if g.get("skipped"):
            lines += [f"Skipped: {g['skipped']}", ""]
        else:
            lines += ["| allocator | us/step |", "|---|---:|"]
            for name, cell in g["allocators"].items():
                lines.append(f"| {name} | {_fmt(cell.get('us_per_step'), '.1f') if 'error' not in cell else cell['error']} |")
            lines += ["", f"cudaFree behind a queued kernel: {g['free_sync']}", ""]
    d = results.get("doctor")
    if d:
        t = d["targets"]
        lines += ["## Memory doctor and whole-trace frames (benchmarks/bench_doctor.py)", "",
                  f"Frames from: {d['frames_source']}.", "",
                  "| figure | value | target | |", "|---|---:|---:|---|",
                  f"| frames of the whole trace, ready to play ({d['frames']:,} events) | "
                  f"{_fmt(d['frames_fullstep_s'])} s | <= 5 s | **{_mark(t['frames_fullstep_s']['pass'])}** |",
                  f"| jump to any frame: slowest of the random jumps, each the best of 3 timings (median {_fmt(d['jump_ms_median'])}, "
                  f"p95 {_fmt(d['jump_ms_p95'])}) | {_fmt(d['jump_ms_max'])} ms | <= 50 ms | "
                  f"**{_mark(t['jump_ms_max']['pass'])}** |",
                  f"| block map SVG of a frame (median, drawn apart) | {_fmt(d['draw_ms_median'])} ms | | |"]
        if d.get("doctor_fullstep_s") is not None:
            lines.append(f"| `doctor` on {d['trace']} ({d['events']:,} events, no target: capacity inference "
                         f"and the full anchored remedy sweep, {d['replays']} replays) | "
                         f"{_fmt(d['doctor_fullstep_s'])} s ({d['doctor_ms_per_1000_events']:,.0f} ms per 1,000 "
                         f"events) | < 15 s | **{_mark(t['doctor_fullstep_s']['pass'])}** |")
            if d.get("doctor_squeezed_s") is not None:
                lines.append(f"| `doctor --device-memory {d.get('device_memory_gib')}` on the same trace | "
                             f"{_fmt(d['doctor_squeezed_s'])} s | | |")
        else:
            lines.append(f"| `doctor` | skipped: {d.get('skipped_doctor')} | < 15 s | n/a |")
        if d.get("doctor_big_expandable_s") is not None:
            lines.append(f"| `doctor` on a course-made 150 GiB expandable run ({d['big_events']:,} events, no option; "
                         f"reproduced: {'yes' if d['big_reproduced'] else 'NO'}, simulated GPU "
                         f"{d['big_simulated_gpu']}) | {_fmt(d['doctor_big_expandable_s'])} s | | |")
        lines.append("")
    dw = results.get("doctor_workers")
    if dw:
        lines += ["## `doctor FOLDER` on one worker and on two (benchmarks/bench_doctor_workers.py)", "",
                  f"{dw['folder']}, {dw['cores']} cores, load average {dw['load_average_before']} before and "
                  f"{dw['load_average_after']} after:", "",
                  f"- 1 worker {dw['one_worker_s']:.2f} s, 2 workers {dw['two_workers_s']:.2f} s (best of the runs): "
                  f"speed-up **{dw['speed_up']:.2f}x**; the same report with both: "
                  f"**{'yes' if dw['same_report'] else 'NO'}**", ""]
        if dw["load_average_before"] >= dw["cores"]:
            lines[-1:] = ["- the machine was already busy (load average at or above its cores): a second worker "
                          "only helps with a core to spare, so this speed-up is a floor, not the pool's", ""]
    p = results.get("predict")
    if p:
        lines += ["## Predict before you run (benchmarks/bench_predict.py)", ""]
        lines += ([f"Skipped: {p['skipped']}", ""] if p.get("skipped") else
                  bench_predict.markdown(p["rows"], p["gpt2_medium"], p.get("replay_scaling")).splitlines()[2:] + [""])
    e = results.get("engine")
    if e:
        t = e["targets"]
        lines += ["## Replay engine: pending frees and the doctor's cost (benchmarks/bench_engine.py)", "",
                  "Generated traces with a backlog of record_stream frees (benchmarks/gen_pending_frees.py), "
                  "the recording loaded before the clock starts.", "",
                  "| tool | pending frees | events | CPU seconds | us per event |", "|---|---:|---:|---:|---:|"]
        for r in e["pending_frees"]["rows"]:
            lines.append(f"| {r['tool']} | {r['frees']:,} | {r['events']:,} | {r['seconds']:.3f} | "
                         f"{r['us_per_event']:.1f} |")
        growth = ", ".join(f"{k} {v:.2f}x" for k, v in e["pending_frees"]["growth_per_event"].items())
        lines += ["", f"- cost per event, largest over smallest: {growth or '-'}; target <= 1.5x (linear): "
                      f"**{_mark(t['pending_frees_growth']['pass'])}**"]
        dv = e.get("doctor_vs_replay")
        if dv:
            lines.append(f"- `doctor` / `replay --verify` on the full step, whole processes in turn "
                         f"({dv['runs']} runs, medians): CPU {dv['doctor_cpu_s']:.2f} s / {dv['replay_cpu_s']:.2f} s "
                         f"= **{dv['ratio_cpu']:.2f}x**, wall {dv['ratio_wall']:.2f}x; target <= 3x: "
                         f"**{_mark(t['doctor_vs_replay_cpu']['pass'])}**")
        else:
            lines.append("- `doctor` / `replay --verify`: skipped (no ../shared/traces)")
        lines.append("")
    lo = results.get("loader")
    if lo:
        t, big = lo["targets"], lo["largest_trace"]
        lines += ["## Loader and one verify replay, whole processes (benchmarks/bench_loader.py)", "",
                  f"- `replay --verify` on {big['file']} ({big['file_mib']:.1f} MiB): {big['wall_s']:.2f} s wall, "
                  f"{big['cpu_s']:.2f} s CPU, peak RSS {big['peak_rss_mib']:.0f} MiB ({big['rss_over_file']:.1f}x the file)",
                  "", "Loading alone, the run's device copied as more ranks (benchmarks/scale_snapshot.py):", "",
                  "| copies | file MiB | wall s | CPU s | MiB/s (wall) | peak RSS MiB | RSS / file |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in lo["scaled_loads"]:
            lines.append(f"| {r['copies']} | {r['file_mib']:.1f} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['mib_per_s']:.1f} | "
                         f"{r['peak_rss_mib']:.0f} | {r['rss_over_file']:.1f}x |")
        bf = lo.get("big_file")
        if bf:
            lines += ["", f"The run scaled to {bf['copies']} ranks ({bf['file_mib']:,.0f} MiB), each tool a whole process "
                          "(CPU: the process and its workers; tree: PSS summed over its processes, a page shared "
                          "copy-on-write counted once, sampled twice a second; RSS summed: an upper bound):", "",
                      "| tool | wall s | CPU s | peak RSS MiB | RSS / file | tree PSS / file | tree RSS sum / file |",
                      "|---|---:|---:|---:|---:|---:|---:|"]
            for tool in ("load", "replay --verify", "doctor"):
                r = bf[tool]
                stopped = " (stopped at the time limit)" if r.get("timed_out") else ""
                tree = (f"{r['tree_pss_over_file']:.2f}x | {r['tree_rss_sum_over_file']:.2f}x"
                        if "tree_pss_over_file" in r else "- | -")
                lines.append(f"| `{tool}`{stopped} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['peak_rss_mib']:,.0f} | "
                             f"{r['rss_over_file']:.2f}x | {tree} |")
        dv = lo["doctor_vs_replay"]
        lines.append("")
        for name, what in (("big_doctor_wall_s", "`doctor` on the largest, wall seconds"),
                           ("big_doctor_memory", "`doctor` on the largest, its process tree's peak PSS over the file")):
            if name in t and t[name]["value"] is not None:
                lines.append(f"- {what}: {t[name]['value']:.2f}; target {t[name]['target']}: **{_mark(t[name]['pass'])}**")
        lines += ["", f"- peak RSS over file size on the largest: {t['load_rss_over_file']['value']:.1f}x; target "
                      f"{t['load_rss_over_file']['target']}: **{_mark(t['load_rss_over_file']['pass'])}**",
                  f"- `doctor` / `replay --verify` ({dv['runs']} runs, medians): CPU **{dv['ratio_cpu']:.2f}x**, "
                  f"wall {dv['ratio_wall']:.2f}x; target {t['doctor_vs_replay_cpu']['target']}: "
                  f"**{_mark(t['doctor_vs_replay_cpu']['pass'])}**"]
        each = lo.get("doctor_vs_replay_each") or []
        if each:
            lines.append("- the same on every real trace (one run each, CPU): " + ", ".join(
                f"{e['file'].removesuffix('.pickle')} {e['ratio_cpu']:.2f}x" for e in each))
        lines.append("")
    v = results.get("viz")
    if v:
        lines += ["## Block map and player (benchmarks/bench_viz.py)", "", "| figure | value |", "|---|---:|"]
        for key, value in v.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                lines.append(f"| {key} | {value:,.3f} |" if isinstance(value, float) else f"| {key} | {value:,} |")
        lines.append("")
    # The suite's own time is measured by whole test runs (make test prints its slowest tests), not by a
    # benchmark: its section is kept in test_time.md and shown here as written.
    kept = RESULTS / "test_time.md"
    if kept.exists():
        lines += [kept.read_text(encoding="utf-8").rstrip("\n"), ""]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None, out_dir: Optional[Path] = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    ap.add_argument("--out", type=Path, default=out_dir or RESULTS, help="where the JSON and REPORT.md go")
    ap.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS), help="run only these")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = {}
    for name, fn in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        print(f"== {name} ==", flush=True)
        results[name] = fn(quick=args.quick, out_dir=args.out)
    viz = _viz_runner()
    if viz is not None and not args.only:
        print("== viz ==", flush=True)
        try:
            takes_out = "out_dir" in inspect.signature(viz).parameters
            got = viz(quick=args.quick, out_dir=args.out) if takes_out else viz(quick=args.quick)
            if isinstance(got, dict):
                results["viz"] = got
                if not takes_out:
                    write_result("viz", {"quick": args.quick, **got}, args.out)
        except Exception as exc:           # another engineer's benchmark: report, don't abort ours
            print(f"[viz] failed: {type(exc).__name__}: {exc}")
    args.out.mkdir(parents=True, exist_ok=True)
    # --only reruns some benchmarks: the report still shows the others, as their files last recorded them.
    for name in [*BENCHMARKS, "viz"]:
        stored = args.out / f"{name}.json"
        if name not in results and args.only and stored.exists():
            results[name] = json.loads(stored.read_text())
    (args.out / "REPORT.md").write_text(report(results, args.quick))
    print(f"wrote {args.out}/REPORT.md ({time.perf_counter() - t0:.1f} s)")
    return results


if __name__ == "__main__":
    main()
