"""Command line: ``python -m allocator_ref replay|compare|doctor SNAPSHOT ...``.

    python -m allocator_ref replay snap.pickle --verify          # does the reference allocator match PyTorch?
    python -m allocator_ref replay snap.pickle --config "expandable_segments:True"
    python -m allocator_ref compare snap.pickle --plot compare.png   # the what-if table
    python -m allocator_ref traces fetch                         # download the real snapshots (sha256-checked)
    python -m allocator_ref doctor snap.pickle --html report.html    # diagnosis + remedies, proven by replay

A bad argument or a bad file is one line on stderr (exit 2); ``--debug`` shows the traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

GiB = 1024**3
MAX_DEVICE_GIB = 2**20          # 1 PiB: far beyond any GPU, small enough to stay exact in bytes


# ---- argument types: a bad value is argparse's clear one-line error, before anything runs
def device_gib(text: str) -> float:
    """--device-memory: a finite, positive number of GiB."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GiB (e.g. 16 or 0.5)") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_DEVICE_GIB:
        raise argparse.ArgumentTypeError(f"{text!r}: the device size must be a number of GiB above 0 "
                                         f"and at most {MAX_DEVICE_GIB:,}")
    if int(value * GiB) < 2**20:
        raise argparse.ArgumentTypeError(f"{text!r} GiB is under 1 MiB: no GPU is that small")
    return value


def profile_name(text: str) -> str:
    """--profile: one of the simulated GPUs in allocator_ref/device/profiles."""
    from .device.costs import profile_names
    names = profile_names()
    if text not in names:
        raise argparse.ArgumentTypeError(f"unknown profile {text!r}; choose one of {', '.join(names)}")
    return text


def plot_path(text: str) -> str:
    """--plot: a file in a folder that exists, with an image suffix matplotlib can write."""
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: the folder {str(path.parent)!r} does not exist")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name such as compare.png")
    from matplotlib.backend_bases import FigureCanvasBase
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise argparse.ArgumentTypeError(f"{text!r}: end the name with one of "
                                         f"{', '.join('.' + f for f in sorted(formats))}")
    return text

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


def _print_replay(result, out=None) -> None:
    out = out or sys.stdout            # looked up at call time (a test's or notebook's stdout)
    j = result.to_json()
    mode = "verify against PyTorch" if result.verify else "what-if"
    print(f"{result.source}: {mode}, policy {result.policy}, config {result.config or '(default)'!r} "
          "(simulated device)", file=out)
    several = len(result.devices) > 1
    for d in result.devices:
        for note in d.inferred:
            print(f"  inferred{f' (device {d.device})' if several else ''}: {note}", file=out)
    if j.get("pools"):
        print(f"  private pools kept: {', '.join(map(str, j['pools']))} "
              f"({j['pool_requests']} requests routed into them)", file=out)
    if result.verify:
        pct = 100.0 * j["allocs_exact"] / j["allocs"] if j["allocs"] else 100.0
        print(f"  allocations at PyTorch's address: {j['allocs_exact']}/{j['allocs']} ({pct:.1f}%)", file=out)
        print(f"  segment allocs/maps: {j['segment_allocs_made']} made, {j['segment_allocs_expected']} in the trace", file=out)
        print(f"  segment frees/unmaps: {j['segment_frees_made']} made, {j['segment_frees_expected']} in the trace", file=out)
        print(f"  OOMs: {j['ooms_raised']} raised, {j['ooms_expected']} in the trace", file=out)
        div = j["first_divergence"]
        print(f"  first divergence: {'none' if div is None else json.dumps(div)}", file=out)
        print(f"  final state equals the snapshot's segments: {j['final_state_equal']}", file=out)
        _print_devices(result, out)
    print(f"  peak reserved {_mib(j['peak_reserved'])}, peak allocated {_mib(j['peak_allocated'])}, "
          f"fragmentation at peak {_mib(j['fragmentation_at_peak'])}", file=out)
    print(f"  device calls {j['device_calls']}, simulated time {j['simulated_time_us'] / 1000:.1f} ms", file=out)
    if not result.verify:
        print(f"  out-of-memory errors: {j['ooms_raised']}" + ("" if j["ooms_raised"] else " (it fits)"), file=out)


def _print_devices(result, out) -> None:
    """One line per device: what was checked there and whether it matched (--verify)."""
    if not result.devices:
        print("  nothing to verify: the snapshot holds no segments and no trace events", file=out)
    for d in result.devices:
        looked = f", {d.snapshot_entries} 'snapshot' entries left out" if d.snapshot_entries else ""
        if d.state_only:
            what = (f"state only (no trace events{looked}): {d.segments_compared} segments rebuilt "
                    "from the snapshot alone and compared")
        else:
            what = f"{d.events} events replayed, {d.allocs_exact}/{d.allocs} allocations exact{looked}"
        verdict = "verified" if d.final_state_equal else "NOT verified"
        print(f"  device {d.device}: {what}: {verdict}", file=out)
        for line in (d.final_state_diff.splitlines() if not d.final_state_equal else [])[:5]:
            print(f"    {line}", file=out)


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


def cmd_traces(args) -> int:
    from .trace import fetch
    if args.traces_command == "fetch":
        return fetch.main_fetch(args.names, args.to, args.base_url)
    return fetch.main_list()
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
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("replay", help="replay a snapshot's trace (verify it, or try another config/policy)")
    p.add_argument("snapshot")
    p.add_argument("--config", default=None, help='PYTORCH_CUDA_ALLOC_CONF string (default: the snapshot\'s own)')
    p.add_argument("--policy", default="caching", choices=["caching", "stream_ordered", "bfc", "direct"])
    p.add_argument("--verify", action="store_true", help="compare every decision with PyTorch's, address for address")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--profile", type=profile_name, default="h100-80gb", help="simulated device profile")
    p.add_argument("--device-memory", type=device_gib, default=None,
                   help="GiB: replay on a simulated GPU of this size and count the OOMs")
    p.set_defaults(func=cmd_replay)
    c = sub.add_parser("compare", help="what-if table: the same run under several configs and policies")
    c.add_argument("snapshot")
    c.add_argument("--profile", type=profile_name, default="h100-80gb")
    c.add_argument("--device-memory", type=device_gib, default=None, help="GiB: say whether each design fits")
    c.add_argument("--plot", type=plot_path, default=None, help="write a bar chart PNG here")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_compare)
    t = sub.add_parser("traces", help="the real PyTorch snapshots: fetch them once, or list where they are")
    tsub = t.add_subparsers(dest="traces_command", required=True)
    f = tsub.add_parser("fetch", help="download them from their public sources into the per-user cache")
    f.add_argument("names", nargs="*", help="only these files (default: all)")
    f.add_argument("--to", default=None, help="folder to store them (default: ALLOCATOR_REF_TRACES, else the cache)")
    f.add_argument("--from", dest="base_url", default="https://raw.githubusercontent.com",
                   help="a mirror laid out like raw.githubusercontent.com (owner/repo/commit/path)")
    tsub.add_parser("list", help="where the course finds each snapshot, or that it is missing")
    t.set_defaults(func=cmd_traces)
    d = sub.add_parser("doctor", help="why a run ran out of memory (or wasted it), and which setting fixes it, "
                                      "each remedy proven by replay")
    d.add_argument("snapshot")
    d.add_argument("--device-memory", type=device_gib, default=None,
                   help="GiB: the GPU to fit in (default: what the snapshot's OOM tells, if it has one)")
    d.add_argument("--html", default=None, help="write the self-contained HTML report here")
    d.add_argument("--json", action="store_true", help="print the report as one JSON object")
    d.add_argument("--device", type=int, default=None, help="which GPU of a multi-GPU snapshot")
    d.add_argument("--profile", type=profile_name, default="h100-80gb",
                   help="simulated device profile for the replays")
    d.set_defaults(func=cmd_doctor)
    for subparser in sub.choices.values():      # --debug after the command works too
        if "--debug" not in subparser._option_string_actions:
            subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                   help="show the full traceback of an error")
    args = parser.parse_args(argv)
    return run_command(args)


def run_command(args) -> int:
    """Run the chosen command; any error is one line on stderr (the traceback only with --debug)."""
    if args.debug:
        return args.func(args)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as exc:     # SnapshotError, config and settings errors among them
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:                 # a bug, or an input nothing above foresaw
        print(f"error: {type(exc).__name__}: {_one_line(exc)} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:                        # an exception whose message itself fails
        text = type(exc).__name__
    text = " ".join(text.split()) or type(exc).__name__
    return text if len(text) <= 2000 else text[:2000] + "..."


if __name__ == "__main__":
    sys.exit(main())
