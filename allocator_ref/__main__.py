"""Command line: ``python -m allocator_ref replay|compare|doctor SNAPSHOT ...``.

    python -m allocator_ref replay snap.pickle --verify          # does the reference allocator match PyTorch?
    python -m allocator_ref replay snap.pickle --config "expandable_segments:True"
    python -m allocator_ref compare snap.pickle --plot compare.png   # the what-if table
    python -m allocator_ref traces fetch                         # download the real snapshots (sha256-checked)
    python -m allocator_ref doctor snap.pickle --html report.html    # diagnosis + remedies, proven by replay
    python -m allocator_ref doctor snap.pickle --lang zh             # the report in Chinese (or LANG=zh_CN.UTF-8)
    python -m allocator_ref doctor --diff before.pickle after.pickle # what changed between two runs
    python -m allocator_ref predict train.py --set batch_size=16 --profile t4-16gb   # will it fit? (runs train.py's step)

A bad argument or a bad file is one line on stderr (exit 2); ``--debug`` shows the traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import stat
import unicodedata
import sys
from pathlib import Path

from .editions.messages import translator
from .editions.language import LANGUAGES   # the --lang choices
from .textsafe import EscapingWriter
from .units import percent_of

tr = translator("doctor")          # the doctor's own lines (its report carries its words)

GiB = 1024**3
# 1 PiB: far beyond any GPU.  A replay reserves the device's whole size of addresses for each
# stream's expandable segment, and the simulated address space (2**63 bytes) must hold thousands of
# those; bytes also stay exact in a float below this.
MAX_DEVICE_GIB = 2**20


# ---- argument types: a bad value is argparse's clear one-line error, before anything runs
def device_gib(text: str) -> float:
    """--device-memory: a finite, positive number of GiB."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(tr("{text} is not a number of GiB (e.g. 16 or 0.5)", text=repr(text))) from None
    if not math.isfinite(value) or value <= 0 or value > MAX_DEVICE_GIB:
        raise argparse.ArgumentTypeError(tr("{text}: the device size must be a number of GiB above 0 and at most "
                                            "{most} (1 PiB): a replay reserves the device's size of addresses per "
                                            "stream, and the simulated address space must hold thousands of those",
                                            text=repr(text), most=f"{MAX_DEVICE_GIB:,}"))
    if int(value * GiB) < 2**20:
        raise argparse.ArgumentTypeError(tr("{text} GiB is under 1 MiB: no GPU is that small", text=repr(text)))
    return value


def seconds(text: str) -> float:
    """--deadline: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(tr("{text} is not a number of seconds (e.g. 300)", text=repr(text))) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(tr("{text}: give a number of seconds above 0", text=repr(text)))
    return value


def profile_name(text: str) -> str:
    """--profile: one of the simulated GPUs in allocator_ref/device/profiles."""
    from .device.costs import profile_names
    names = profile_names()
    if text not in names:
        raise argparse.ArgumentTypeError(tr("unknown profile {text}; choose one of {names}", text=repr(text),
                                            names=", ".join(names)))
    return text


def output_file(text: str, example: str) -> Path:
    """An output file checked before any work (ValueError, saying why, if it cannot be one): its
    folder exists and may be written, and the name is a regular file or nothing yet (a folder
    failed only when the report was written, after every replay; a FIFO blocked the write forever)."""
    path = Path(text)
    try:
        info = path.stat() if path.exists() else None
        folder_ok = path.parent.is_dir()
    except (OSError, ValueError) as exc:
        raise ValueError(tr("{path}: cannot use this path ({reason})", path=repr(text), reason=exc)) from None
    if not folder_ok:
        raise ValueError(tr("{path}: its folder does not exist ({folder}); create it or write elsewhere",
                            path=repr(text), folder=repr(str(path.parent))))
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise ValueError(tr("{path} is a folder; give a file name such as {example}", path=repr(text),
                            example=example))
    if info is not None and stat.S_ISFIFO(info.st_mode):
        raise ValueError(tr("{path} is a FIFO (named pipe): writing there could block or go nowhere; give a file "
                            "name such as {example}", path=repr(text), example=example))
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise ValueError(tr("{path} is not a regular file: writing there could block or go nowhere; give a file "
                            "name such as {example}", path=repr(text), example=example))
    if not os.access(path if info is not None else path.parent, os.W_OK):
        raise ValueError(tr("{path}: not writable here; choose another place", path=repr(text)))
    return path


def plot_path(text: str) -> str:
    """--plot: a file in a folder that exists, with an image suffix matplotlib can write."""
    try:
        path = output_file(text, "compare.png")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    from matplotlib.backend_bases import FigureCanvasBase
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise argparse.ArgumentTypeError(tr("{path}: end the name with one of {suffixes}", path=repr(text),
                                            suffixes=", ".join("." + f for f in sorted(formats))))
    return text

from .policies.registry import what_if_designs   # compare's rows: the registry names them once



def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _columns(text: str) -> int:
    """How many terminal columns ``text`` takes: a CJK character (a Chinese table word) takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _cell(text: str, width: int, right: bool = False) -> str:
    """``text`` padded to ``width`` columns (``f"{text:<{width}}"`` for English, aligned for Chinese too)."""
    pad = " " * max(0, width - _columns(text))
    return pad + text if right else text + pad


def _print_replay(result, out=None) -> None:
    out = out or sys.stdout                  # at call time: main() wraps it (textsafe.EscapingWriter)
    j = result.to_json()
    # A course-made file records the course's simulated decisions (provenance.py): never call them PyTorch's.
    mode = (tr("what-if") if not result.verify else tr("verify against the course's recorded run")
            if result.course_made else tr("verify against PyTorch"))
    print(tr("{source}: {mode}, policy {policy}, config {config} (simulated device)", source=result.source,
             mode=mode, policy=result.policy, config=repr(result.config or tr("(default)"))), file=out)
    several = len(result.devices) > 1
    for d in result.devices:
        for note in d.inferred:
            print(tr("  inferred (device {device}): {note}", device=d.device, note=note) if several
                  else tr("  inferred: {note}", note=note), file=out)
    if j.get("pools"):
        print(tr("  private pools kept: {pools} ({n} requests routed into them)",
                 pools=", ".join(map(str, j["pools"])), n=j["pool_requests"]), file=out)
    if result.verify:
        counts = dict(exact=j["allocs_exact"], allocs=j["allocs"], pct=percent_of(j["allocs_exact"], j["allocs"]))
        print(tr("  allocations at the recorded address: {exact}/{allocs} ({pct}%)", **counts) if result.course_made
              else tr("  allocations at PyTorch's address: {exact}/{allocs} ({pct}%)", **counts), file=out)
        print(tr("  segment allocs/maps: {made} made, {expected} in the trace", made=j["segment_allocs_made"],
                 expected=j["segment_allocs_expected"]), file=out)
        print(tr("  segment frees/unmaps: {made} made, {expected} in the trace", made=j["segment_frees_made"],
                 expected=j["segment_frees_expected"]), file=out)
        print(tr("  OOMs: {raised} raised, {expected} in the trace", raised=j["ooms_raised"],
                 expected=j["ooms_expected"]), file=out)
        div = j["first_divergence"]
        print(tr("  first divergence: {divergence}", divergence=tr("none") if div is None else json.dumps(div)),
              file=out)
        print(tr("  final state equals the snapshot's segments: {equal}", equal=j["final_state_equal"]), file=out)
        _print_devices(result, out)
    print(tr("  peak reserved {reserved}, peak allocated {allocated}, fragmentation at peak {fragmentation}",
             reserved=_mib(j["peak_reserved"]), allocated=_mib(j["peak_allocated"]),
             fragmentation=_mib(j["fragmentation_at_peak"])), file=out)
    print(tr("  device calls {calls}, simulated time {ms} ms", calls=j["device_calls"],
             ms=f"{j['simulated_time_us'] / 1000:.1f}"), file=out)
    if not result.verify:
        print(tr("  out-of-memory errors: {n}", n=j["ooms_raised"]) + ("" if j["ooms_raised"] else tr(" (it fits)")),
              file=out)


def _print_devices(result, out) -> None:
    """One line per device: what was checked there and whether it matched (--verify)."""
    if not result.devices:
        print(tr("  nothing to verify: the snapshot holds no segments and no trace events"), file=out)
    for d in result.devices:
        looked = tr(", {n} 'snapshot' entries left out", n=d.snapshot_entries) if d.snapshot_entries else ""
        if d.state_only:
            what = tr("state only (no trace events{looked}): {n} segments rebuilt from the snapshot alone and compared",
                      looked=looked, n=d.segments_compared)
        else:
            what = tr("{events} events replayed, {exact}/{allocs} allocations exact{looked}", events=d.events,
                      exact=d.allocs_exact, allocs=d.allocs, looked=looked)
        verdict = tr("verified") if d.reproduced else tr("NOT verified")
        print(tr("  device {device}: {what}: {verdict}", device=d.device, what=what, verdict=verdict), file=out)
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
    """The same run under every design of ``what_if_designs()``; one row each (the first: as recorded).

    The rows are anchored what-ifs (``memory_doctor.what_if``): each starts from PyTorch's own
    state at the first event and replays the program's actions, so the first row is the run
    that happened.  A trace the reference allocator does not reproduce falls back to plain
    replays from an empty allocator, and every row says so (``anchored`` False).
    """
    from .memory_doctor import what_if
    from .trace.recording import load_recording
    from .trace.replay_report import DidNotReproduce
    data = load_recording(snapshot)           # loaded and checked once, for every row
    try:
        trials, capacity = what_if(data, [(p, c) for p, c in what_if_designs(data.policy) if (p, c) != (data.policy, "")],
                                   device_memory=device_memory, profile=profile)
    except DidNotReproduce:                   # the type, not the words: they are in the reader's language
        return _plain_rows(data, profile, device_memory)
    rows = []
    for t in trials:
        label = t.change or {"recorded": "(as recorded)", "recorded-on-target": "(recorded settings, target)"}.get(
            t.kind, "(default)")
        rows.append({"policy": t.policy, "config": label,
                     "peak_reserved": t.peak_reserved, "peak_allocated": t.peak_allocated,
                     "fragmentation_at_peak": t.fragmentation, "device_calls": t.device_calls,
                     "num_alloc_retries": t.alloc_retries, "simulated_ms": t.device_call_ms,
                     "fits": t.fits if device_memory is not None else None, "anchored": True,
                     "reproduces": None if t.kind != "recorded" else t.mismatch is None,
                     "prediction": t.policy != data.policy,
                     "capacity": None if t.kind != "recorded" else capacity.to_json(),
                     "skipped": t.skipped or None})      # not replayed (why): its figures are not measured
    return rows


def _plain_rows(data, profile: str, device_memory):
    from .trace.replay import replay
    rows = []
    size = None if device_memory is None else int(device_memory * GiB)
    for policy, config in what_if_designs(data.policy):
        result = replay(data, config=config, policy=policy, profile=profile, device_memory=size,
                        progress=False).to_json()
        rows.append({"policy": policy, "config": config or "(default)",
                     "peak_reserved": result["peak_reserved"], "peak_allocated": result["peak_allocated"],
                     "fragmentation_at_peak": result["fragmentation_at_peak"],
                     "device_calls": result["device_calls"], "num_alloc_retries": None,
                     "simulated_ms": result["simulated_time_us"] / 1000,
                     "fits": None if size is None else result["fits"], "anchored": False,
                     "reproduces": None, "prediction": policy != data.policy, "capacity": None})
    return rows


def cmd_compare(args) -> int:
    rows = compare_rows(args.snapshot, args.profile, args.device_memory)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(tr("{snapshot}: what-if (simulated device '{profile}')", snapshot=args.snapshot, profile=args.profile))
    if rows[0]["anchored"]:
        cap = rows[0]["capacity"] or {}
        gpu = (tr("{gib} GiB usable, the GPU this run behaved like", gib=f"{cap['target'] / GiB:.2f}") if cap.get("known")
               else tr("uncapped (the run never flushed on retry nor ran out of memory: its GPU's size is unknown)"))
        if args.device_memory:
            gpu = tr("{gib} GiB (--device-memory)", gib=f"{args.device_memory:g}")
        print(tr("every row replays the run's own program from the state recorded at its first event; GPU: {gpu}",
                 gpu=gpu))
        print(tr("the first row is the run as recorded: it reproduces the recorded reserved curve") if rows[0]["reproduces"]
              else tr("the first row is the run as recorded: it does NOT reproduce the recorded curve, "
                      "so the other rows are not comparable"))
    else:
        print(tr("the reference allocator does not reproduce this trace: plain replays from an empty allocator, "
                 "not anchored to the recorded run"))
    header = " ".join([_cell(tr("policy"), 15), _cell(tr("config"), 28), _cell(tr("peak reserved"), 15, True),
                       _cell(tr("peak allocated"), 15, True), _cell(tr("frag @ peak"), 13, True),
                       _cell(tr("calls"), 7, True), _cell(tr("retries"), 8, True)])
    if args.device_memory:
        header += "  " + tr("fits {gib} GiB", gib=f"{args.device_memory:g}")
    print(header)
    for r in rows:
        if r.get("skipped"):
            print(f"{r['policy']:<15} {_cell(_config_words(r['config']), 28)} "
                  + tr("not replayed: {why}", why=r["skipped"]))
            continue
        retries = "-" if r["num_alloc_retries"] is None else f"{r['num_alloc_retries']:,}"
        line = (f"{r['policy']:<15} {_cell(_config_words(r['config']), 28)} {_mib(r['peak_reserved']):>15} "
                f"{_mib(r['peak_allocated']):>15} {_mib(r['fragmentation_at_peak']):>13} {r['device_calls']:>7} "
                f"{retries:>8}")
        if r["fits"] is not None:
            line += "  " + (tr("yes") if r["fits"] else tr("NO (OOM)"))
        if r["prediction"]:
            line += "  " + tr("(model prediction)")
        print(line)
    rows = [r for r in rows if not r.get("skipped")]
    if len({r["peak_reserved"] for r in rows}) == 1:
        print(tr("every row has the same peak reserved: on this run no design or setting changes what is held at "
                 "the peak (compare the calls and retries columns for what they do cost)"))
    if args.plot:
        from .memory_doctor.charts import plot_what_if
        target = None if args.device_memory is None else int(args.device_memory * GiB)
        chart_rows = [{"label": r["policy"] if r["prediction"] else r["config"],   # another design: its name
                       "peak_reserved": r["peak_reserved"], "peak_allocated": r["peak_allocated"],
                       "fragmentation": r["fragmentation_at_peak"], "fits": r["fits"]} for r in rows]
        from .editions.language import speaking
        from .viz.chart_language import chart_language
        with speaking(chart_language()):              # the title in a language the chart's fonts can draw
            title = tr("What if: the same program under other allocators (simulated)")
        fig = plot_what_if(chart_rows, target=target, title=title)
        fig.savefig(args.plot, dpi=100)
        print(tr("plot written to {path}", path=args.plot))
    return 0


def _config_words(label: str) -> str:
    """A row's config in the reader's language when it is one of the table's own words, else as typed."""
    words = {"(as recorded)": tr("(as recorded)"), "(recorded settings, target)": tr("(recorded settings, target)"),
             "(default)": tr("(default)")}
    return words.get(label, label)


def cmd_traces(args) -> int:
    from .trace import fetch
    if args.traces_command == "fetch":
        return fetch.main_fetch(args.names, args.to, args.base_url, deadline=args.deadline,
                                total_deadline=args.total_deadline)
    return fetch.main_list()
def cmd_doctor(args) -> int:
    """Exit status 0, or 1 when the replay does not reproduce PyTorch (and no advice is given)."""
    from pathlib import Path
    from .memory_doctor import doctor
    if args.html:                                     # before the replays, not after them
        try:
            output_file(args.html, "report.html")
        except ValueError as exc:
            raise ValueError(f"--html {exc}") from None
    snapshots = args.snapshot
    if args.diff:                                     # two runs of one program: what changed
        if len(snapshots) != 2:
            raise ValueError(tr("--diff compares two runs: give two snapshots (before and after), got {n}",
                                n=len(snapshots)))
        from .memory_doctor.diff import doctor_diff
        report = doctor_diff(snapshots[0], snapshots[1], device=args.device, profile=args.profile)
    elif len(snapshots) > 1 or Path(snapshots[0]).is_dir():       # every rank of one job
        from .memory_doctor.ranks import doctor_ranks         # (imported only then: statistics, hashlib)
        report = doctor_ranks(snapshots, args.device_memory, device=args.device, profile=args.profile)
    else:
        report = doctor(snapshots[0], args.device_memory, device=args.device, profile=args.profile)
    if args.html:
        report.html(args.html)
    if args.json:
        print(json.dumps(report.to_json(), default=str))
    else:
        print(report.text(), end="")
        if args.html:
            print(tr("HTML report written to {path}", path=args.html))
    return 0 if getattr(report.diagnosis, "verified", True) else 1


LANG_HELP = ("the human-readable lines' language (default: ALLOCATOR_REF_LANG, a Chinese edition folder, "
             "the course-settings.toml language, the locale, else English); --json keys stay English")


def add_lang(parser) -> None:
    """``--lang en|zh`` on a command that has none yet (predict's own parser included): one option,
    one help sentence, the same for every command; run_command speaks it."""
    if "--lang" not in parser._option_string_actions:
        parser.add_argument("--lang", choices=LANGUAGES, default=None, help=LANG_HELP)
    for action in parser._actions:                # traces list / traces fetch take it after their name too
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                add_lang(child)


def make_parser() -> argparse.ArgumentParser:
    """The whole command line: every command, its options and their help (said in the reader's language)."""
    from .policies.registry import policy_names
    from .editions.cli_words import CourseParser
    # CourseParser: --help in the reader's language (editions/cli_words.py); every subparser inherits it
    parser = CourseParser(prog="python -m allocator_ref",
                          description="Replay PyTorch memory snapshots on the reference allocator.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("replay", help="replay a snapshot's trace (verify it, or try another config/policy)")
    p.add_argument("snapshot")
    p.add_argument("--config", default=None, help='PYTORCH_CUDA_ALLOC_CONF string (default: the snapshot\'s own)')
    p.add_argument("--policy", default=None, choices=policy_names(),
                   help="the allocator design to replay under (any registered policy; default: the one "
                        "that recorded the file, torch_npu's 'npu' or PyTorch's 'caching')")
    p.add_argument("--verify", action="store_true", help="compare every decision with PyTorch's, address for address")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--profile", type=profile_name, default="h100-80gb", help="simulated device profile")
    p.add_argument("--device-memory", type=device_gib, default=None,
                   help="GiB: replay on a simulated GPU of this size and count the OOMs")
    p.add_argument("--lang", choices=LANGUAGES, default=None, help=LANG_HELP)
    p.set_defaults(func=cmd_replay)
    c = sub.add_parser("compare", help="what-if table: the same run under several configs and policies")
    c.add_argument("snapshot")
    c.add_argument("--profile", type=profile_name, default="h100-80gb")
    c.add_argument("--device-memory", type=device_gib, default=None, help="GiB: say whether each design fits")
    c.add_argument("--plot", type=plot_path, default=None, help="write a bar chart PNG here")
    c.add_argument("--json", action="store_true")
    c.add_argument("--lang", choices=LANGUAGES, default=None, help=LANG_HELP)
    c.set_defaults(func=cmd_compare)
    t = sub.add_parser("traces", help="the real PyTorch snapshots: fetch them once, or list where they are")
    tsub = t.add_subparsers(dest="traces_command", required=True)
    f = tsub.add_parser("fetch", help="download them from their public sources into the per-user cache")
    f.add_argument("names", nargs="*", help="only these files (default: all)")
    f.add_argument("--to", default=None, help="folder to store them (default: ALLOCATOR_REF_TRACES, else the cache)")
    f.add_argument("--from", dest="base_url", default="https://raw.githubusercontent.com",
                   help="a mirror laid out like raw.githubusercontent.com (owner/repo/commit/path)")
    f.add_argument("--deadline", type=seconds, default=None,
                   help="seconds one file may take in all (default: 120 s plus 1 s per 16 KiB)")
    f.add_argument("--total-deadline", type=seconds, default=None,
                   help="seconds the whole fetch may take, every file together (default: 120 s plus 1 s per "
                        "16 KiB of all the files)")
    tsub.add_parser("list", help="where the course finds each snapshot, or that it is missing")
    t.set_defaults(func=cmd_traces)
    d = sub.add_parser("doctor", help="why a run ran out of memory (or wasted it), and which setting fixes it, "
                                      "each remedy proven by replay")
    d.add_argument("snapshot", nargs="+", help="a snapshot; several (or a folder of them): every rank of one job, "
                                               "compared")
    d.add_argument("--device-memory", type=device_gib, default=None,
                   help="GiB: the GPU to fit in (default: what the snapshot's OOM tells, if it has one)")
    d.add_argument("--diff", action="store_true", help="two snapshots of one program (before, after): what "
                                                        "changed, and the settings' share of the peak's move, replayed")
    d.add_argument("--html", default=None, help="write the self-contained HTML report here")
    d.add_argument("--json", action="store_true", help="print the report as one JSON object")
    d.add_argument("--device", type=int, default=None, help="which GPU of a multi-GPU snapshot")
    d.add_argument("--profile", type=profile_name, default=None,
                   help="simulated device profile for the replays (default: h100-80gb, or atlas-800t-a2-64gb for "
                        "a torch_npu run)")
    d.add_argument("--lang", choices=LANGUAGES, default=None,
                   help="the report's language (default: ALLOCATOR_REF_LANG, a Chinese edition folder, the "
                        "course-settings.toml language, the locale, else English)")
    d.set_defaults(func=cmd_doctor)
    from .predict.cli import add_parser as add_predict_parser     # predict/cli.py: runs user code, bounded
    add_predict_parser(sub, profile_name, device_gib, seconds, output_file)
    for subparser in sub.choices.values():      # --debug after the command works too
        if "--debug" not in subparser._option_string_actions:
            subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                   help="show the full traceback of an error")
        add_lang(subparser)
    return parser


def main(argv=None) -> int:
    parser = make_parser()
    # Everything printed from here on, the reports, argparse's errors and ours, goes out with
    # control characters escaped: a snapshot's frame names and paths are the file's words (textsafe.py).
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingWriter(sys.stdout), EscapingWriter(sys.stderr)
    try:
        from .editions.cli_words import help_language
        from .editions.language import speaking
        with speaking(help_language(argv)):           # -h prints while parsing, before run_command decides
            args = parser.parse_args(argv)
        return run_command(args)
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = saved


def run_command(args) -> int:
    """Run the chosen command; any error is one line on stderr (the traceback only with --debug).

    The language is decided once, here: ``--lang`` for this command only, else ALLOCATOR_REF_LANG, the
    folder's edition, course-settings.toml's language and the locale (editions/language.py).  The
    whole command, its error line included, is said in it; a language setting the course cannot use
    is itself the one error line (in English: no language was decided)."""
    from .editions.language import language, speaking
    from .settings import SettingsError
    try:
        lang = getattr(args, "lang", None) or language()
    except SettingsError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    with speaking(lang):
        return _run_saying_errors(args)


def _run_saying_errors(args) -> int:
    if args.debug:
        return args.func(args)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(tr("interrupted"), file=sys.stderr)
        return 130
    except (ValueError, OSError) as exc:     # SnapshotError, config and settings errors among them
        print(tr("error: {message}", message=_one_line(exc)), file=sys.stderr)
        return 2
    except Exception as exc:                 # a bug, or an input nothing above foresaw
        print(tr("error: {kind}: {message} (rerun with --debug for the traceback)",
                 kind=type(exc).__name__, message=_one_line(exc)), file=sys.stderr)
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
