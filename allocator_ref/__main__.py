"""Command line: ``python -m allocator_ref replay|compare|doctor SNAPSHOT ...``.

    python -m allocator_ref replay snap.pickle --verify          # does the reference allocator match PyTorch?
    python -m allocator_ref replay snap.pickle --config "expandable_segments:True"
    python -m allocator_ref compare snap.pickle --plot compare.png   # the what-if table
    python -m allocator_ref doctor snap.pickle --html report.html    # diagnosis + remedies, proven by replay
"""
from __future__ import annotations

import argparse
import json
import sys

GiB = 1024**3

WHAT_IFS = (
    ("caching", ""),
    ("caching", "expandable_segments:True"),
    ("caching", "max_split_size_mb:128"),
    ("caching", "roundup_power2_divisions:4"),
    ("stream_ordered", ""),
    ("bfc", ""),
    ("direct", ""),
)


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _print_replay(result, out=sys.stdout) -> None:
    j = result.to_json()
    mode = "verify against PyTorch" if result.verify else "what-if"
    print(f"{result.source}: {mode}, policy {result.policy}, config {result.config or '(default)'!r} "
          "(simulated device)", file=out)
    for note in j["inferred"]:
        print(f"  inferred: {note}", file=out)
    if result.verify:
        pct = 100.0 * j["allocs_exact"] / j["allocs"] if j["allocs"] else 100.0
        print(f"  allocations at PyTorch's address: {j['allocs_exact']}/{j['allocs']} ({pct:.1f}%)", file=out)
        print(f"  segment allocs/maps: {j['segment_allocs_made']} made, {j['segment_allocs_expected']} in the trace", file=out)
        print(f"  segment frees/unmaps: {j['segment_frees_made']} made, {j['segment_frees_expected']} in the trace", file=out)
        print(f"  OOMs: {j['ooms_raised']} raised, {j['ooms_expected']} in the trace", file=out)
        div = j["first_divergence"]
        print(f"  first divergence: {'none' if div is None else json.dumps(div)}", file=out)
        print(f"  final state equals the snapshot's segments: {j['final_state_equal']}", file=out)
    print(f"  peak reserved {_mib(j['peak_reserved'])}, peak allocated {_mib(j['peak_allocated'])}, "
          f"fragmentation at peak {_mib(j['fragmentation_at_peak'])}", file=out)
    print(f"  device calls {j['device_calls']}, simulated time {j['simulated_time_us'] / 1000:.1f} ms", file=out)
    if not result.verify:
        print(f"  out-of-memory errors: {j['ooms_raised']}" + ("" if j["ooms_raised"] else " (it fits)"), file=out)


def cmd_replay(args) -> int:
    from .trace.replay import replay
    size = None if args.device_memory is None else int(args.device_memory * GiB)
    result = replay(args.snapshot, config=args.config, policy=args.policy, verify=args.verify,
                    profile=args.profile, device_memory=size)
    if args.json:
        print(json.dumps(result.to_json(), default=str))
    else:
        _print_replay(result)
    if args.verify and not result.perfect:
        return 1
    return 0


def compare_rows(snapshot, profile: str = "h100-80gb", device_memory: float | None = None):
    """Replay one snapshot under every design of WHAT_IFS; one row each."""
    from .trace.replay import replay
    from .trace.snapshot import load_snapshot
    data = load_snapshot(snapshot) if not isinstance(snapshot, dict) else snapshot
    rows = []
    size = None if device_memory is None else int(device_memory * GiB)
    for policy, config in WHAT_IFS:
        result = replay(data, config=config, policy=policy, profile=profile, device_memory=size,
                        progress=False).to_json()
        fits = None if size is None else result["fits"]
        rows.append({"policy": policy, "config": config or "(default)",
                     "peak_reserved": result["peak_reserved"], "peak_allocated": result["peak_allocated"],
                     "fragmentation_at_peak": result["fragmentation_at_peak"],
                     "device_calls": result["device_calls"], "simulated_ms": result["simulated_time_us"] / 1000,
                     "fits": fits})
    return rows


def cmd_compare(args) -> int:
    rows = compare_rows(args.snapshot, args.profile, args.device_memory)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{args.snapshot}: what-if (simulated device '{args.profile}')")
    header = f"{'policy':<15} {'config':<28} {'peak reserved':>15} {'peak allocated':>15} {'frag @ peak':>13} {'calls':>7}"
    if args.device_memory:
        header += f"  fits {args.device_memory:g} GiB"
    print(header)
    for r in rows:
        line = (f"{r['policy']:<15} {r['config']:<28} {_mib(r['peak_reserved']):>15} "
                f"{_mib(r['peak_allocated']):>15} {_mib(r['fragmentation_at_peak']):>13} {r['device_calls']:>7}")
        if r["fits"] is not None:
            line += "  " + ("yes" if r["fits"] else "NO (OOM)")
        print(line)
    if args.plot:
        from .memory_doctor.charts import plot_what_if
        target = None if args.device_memory is None else int(args.device_memory * GiB)
        chart_rows = [{"label": r["policy"] if r["config"] == "(default)" else f"{r['policy']}: {r['config']}",
                       "peak_reserved": r["peak_reserved"], "peak_allocated": r["peak_allocated"],
                       "fragmentation": r["fragmentation_at_peak"], "fits": r["fits"]} for r in rows]
        fig = plot_what_if(chart_rows, target=target,
                           title="What if: the same requests under other allocators (simulated)")
        fig.savefig(args.plot, dpi=100)
        print(f"plot written to {args.plot}")
    return 0


def cmd_doctor(args) -> int:
    """Exit status 0, or 1 when the replay does not reproduce PyTorch (and no advice is given)."""
    from pathlib import Path
    from .memory_doctor import doctor
    if args.html and not Path(args.html).resolve().parent.is_dir():
        raise ValueError(f"--html {args.html}: its folder does not exist; create it or write the report elsewhere")
    report = doctor(args.snapshot, args.device_memory, device=args.device, profile=args.profile)
    if args.html:
        report.html(args.html)
    if args.json:
        print(json.dumps(report.to_json(), default=str))
    else:
        print(report.text(), end="")
        if args.html:
            print(f"HTML report written to {args.html}")
    return 0 if report.diagnosis.verified else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m allocator_ref",
                                     description="Replay PyTorch memory snapshots on the reference allocator.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("replay", help="replay a snapshot's trace (verify it, or try another config/policy)")
    p.add_argument("snapshot")
    p.add_argument("--config", default=None, help='PYTORCH_CUDA_ALLOC_CONF string (default: the snapshot\'s own)')
    p.add_argument("--policy", default="caching", choices=["caching", "stream_ordered", "bfc", "direct"])
    p.add_argument("--verify", action="store_true", help="compare every decision with PyTorch's, address for address")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--profile", default="h100-80gb", help="simulated device profile")
    p.add_argument("--device-memory", type=float, default=None,
                   help="GiB: replay on a simulated GPU of this size and count the OOMs")
    p.set_defaults(func=cmd_replay)
    c = sub.add_parser("compare", help="what-if table: the same run under several configs and policies")
    c.add_argument("snapshot")
    c.add_argument("--profile", default="h100-80gb")
    c.add_argument("--device-memory", type=float, default=None, help="GiB: say whether each design fits")
    c.add_argument("--plot", default=None, help="write a bar chart PNG here")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_compare)
    d = sub.add_parser("doctor", help="why a run ran out of memory (or wasted it), and which setting fixes it, "
                                      "each remedy proven by replay")
    d.add_argument("snapshot")
    d.add_argument("--device-memory", type=float, default=None,
                   help="GiB: the GPU to fit in (default: what the snapshot's OOM tells, if it has one)")
    d.add_argument("--html", default=None, help="write the self-contained HTML report here")
    d.add_argument("--json", action="store_true", help="print the report as one JSON object")
    d.add_argument("--device", type=int, default=None, help="which GPU of a multi-GPU snapshot")
    d.add_argument("--profile", default="h100-80gb", help="simulated device profile for the replays")
    d.set_defaults(func=cmd_doctor)
    args = parser.parse_args(argv)
    from .trace.snapshot import SnapshotError
    try:
        return args.func(args)
    except (SnapshotError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
