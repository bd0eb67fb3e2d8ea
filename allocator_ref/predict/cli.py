"""The ``predict`` subcommand of ``python -m allocator_ref`` (its parser and what it prints)."""
from __future__ import annotations

import json

from ..editions.messages import translator

tr = translator("doctor")          # a bad value's one line, in the reader's language

GiB = 2**30

HELP = ("will it fit? record SCRIPT's step on meta tensors (no GPU) and replay it on the reference "
        "allocator. THIS RUNS THE SCRIPT'S CODE (only this command does, and only when asked), in a child "
        "process bounded by --timeout and --memory-limit")


def memory_gib(text: str) -> float:
    """--memory-limit: GiB of address space for the script's process (importing torch alone maps a few)."""
    import argparse
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(tr("{text} is not a number of GiB (e.g. 16)", text=repr(text))) from None
    if not 2 <= value <= 2**20:
        raise argparse.ArgumentTypeError(tr("{text}: give between 2 and 1,048,576 GiB (torch needs a few GiB of "
                                            "address space just to import)", text=repr(text)))
    return value


def add_parser(sub, profile_name, device_gib, seconds, output_file) -> None:
    """The argument checkers come from __main__ (passed in: predict/ sits below the command line)."""
    p = sub.add_parser("predict", help=HELP, description=HELP + ". SCRIPT defines a function (default "
                       "'step') that builds its model and tensors with device='cuda' and runs one step; "
                       "its `if __name__ == \"__main__\"` block is not run. Exit status 0 when it fits, 1 when it "
                       "does not, 2 on an error, 3 when predict cannot say (the recording missed something "
                       "it names, e.g. an optimizer stepping tensors it never saw on the GPU). A script that "
                       "calls torch.distributed.init_process_group is recorded as rank 0 of $WORLD_SIZE ranks "
                       "on a fake process group (DDP is followed; FSDP is not modelled and is refused by name, "
                       "with the parameter bytes it would shard).")
    p.add_argument("script", help="a Python file defining the step function (its code runs)")
    p.add_argument("--entry", default="step", help="the function to call (default: step)")
    p.add_argument("--set", dest="knobs", action="append", default=[], metavar="NAME=VALUE",
                   help="a keyword for the step, e.g. --set batch_size=16 (repeatable)")
    p.add_argument("--sweep", default=None, metavar="NAME", help="a keyword to sweep (batch_size, seq_len ...)")
    p.add_argument("--values", default=None, help="the values to try for --sweep, comma-separated: 8,16,32")
    p.add_argument("--profile", type=profile_name, default="h100-80gb", help="simulated GPU")
    p.add_argument("--device-memory", type=device_gib, default=None, help="GiB: the GPU's size (default: the profile's)")
    p.add_argument("--policy", choices=("caching", "npu"), default=None,
                   help="the allocator to replay on: caching (PyTorch's) or npu (torch_npu's, Ascend); default: the "
                        "profile's (npu for the atlas-* profiles)")
    p.add_argument("--timeout", type=seconds, default=300.0,
                   help="seconds the whole command may take, recording and replays (default 300)")
    p.add_argument("--memory-limit", type=memory_gib, default=16.0,
                   help="GiB of address space the script may map (RLIMIT_AS, default 16)")
    p.add_argument("--snapshot", default=None, help="write the predicted snapshot (PyTorch's pickle format) here")
    p.add_argument("--no-what-if", action="store_true", help="skip the doctor's what-if table")
    p.add_argument("--json", action="store_true", help="print the prediction as one JSON object")
    p.set_defaults(func=cmd_predict, check_output=output_file)


def cmd_predict(args) -> int:
    import time
    deadline = time.monotonic() + args.timeout          # --timeout bounds the recording AND the replays
    from .forecast import forecast
    from .sandbox import parse_knob, record_in_subprocess
    knobs = dict(parse_knob(k) for k in args.knobs)
    values = []
    if args.sweep:
        if not args.sweep.isidentifier():
            raise ValueError(f"--sweep {args.sweep!r}: give the step's keyword name, e.g. --sweep batch_size")
        if not args.values:
            raise ValueError("--sweep needs --values, e.g. --values 8,16,32")
        values = [parse_knob(f"v={v.strip()}")[1] for v in args.values.split(",") if v.strip()]
    elif args.values:
        raise ValueError("--values needs --sweep NAME (the keyword they are for)")
    if args.snapshot:
        args.check_output(args.snapshot, "predicted.pickle")
    size = None if args.device_memory is None else int(args.device_memory * GiB)
    recorded = record_in_subprocess(args.script, args.entry, knobs, args.sweep, values, args.profile,
                                    timeout=args.timeout, memory_gib=args.memory_limit)
    prediction = forecast(recorded["program"], args.profile, size, what_if=not args.no_what_if, deadline=deadline,
                          policy=args.policy)
    if args.sweep:
        points = []
        for value, program in recorded["sweep"]:
            trial = forecast(program, args.profile, size, deadline=deadline, policy=args.policy)
            points.append((value, trial.peak_reserved if trial.oom is None else None, trial.fits))
        fitting = [v for v, _, ok in points if ok]
        prediction.sweep = {"knob": args.sweep, "points": points,
                            "largest_fitting": max(fitting) if fitting else None}
    if args.snapshot:
        from ..trace.snapshot import save_snapshot
        save_snapshot(prediction.snapshot, args.snapshot)
    if args.json:
        print(json.dumps(prediction.to_json(), default=str))
    else:
        print(prediction.text(), end="")
        if args.snapshot:
            print(f"predicted snapshot written to {args.snapshot}")
    return {"fits": 0, "no": 1}.get(prediction.verdict, 3)
