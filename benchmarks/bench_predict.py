"""Predicted vs recorded: public PyTorch snapshots, and the programs that made them, predicted on the CPU.

For each snapshot in ../shared/traces whose program benchmarks/predict_programs.py can run,
record that program on meta tensors (allocator_ref.predict), then compare with the real
recording: the allocation sizes in order (how many match, and where the first misses are,
with the real stack that says why), peak allocated and peak reserved (the recorded peaks come
from the reference allocator's --verify replay of the real file, which reproduces PyTorch's
decisions exactly).  Also times the prediction of a GPT-2-medium-sized training step
(target: under 20 s).  Writes results/predict.json and results/predict.md.
"""
from __future__ import annotations

import difflib
import time
from pathlib import Path

from .common import RESULTS, TRACES, write_result

MiB = 2**20
TARGET_RESERVED = 0.05        # predicted peak reserved within 5% of the recorded one
TARGET_SECONDS = 20.0         # GPT-2 medium, batch 8, sequence 1024


def _sizes(events, start=0, end=None):
    return [e["size"] for e in events[start:end] if e["action"] == "alloc"]


def _frames_hint(e) -> str:
    """Where a recorded allocation came from: its innermost Python frame and the ATen kernel."""
    frames = e.get("frames") or []
    py = next((f for f in frames if f["filename"].endswith(".py")), None)
    kernel = next((f["name"].split("(")[0] for f in frames if "at::native::" in f["name"]
                   or "at::(anonymous namespace)::wrapper" in f["name"]), "")
    where = f"{py['filename'].rsplit('/', 1)[-1]}:{py['line']} {py['name']}" if py else "no Python frame"
    return f"{where}{' / ' + kernel if kernel else ''}"


def _cause(kind: str, recorded: list, predicted: list) -> str:
    """The likely reason for one group of misses, from the stacks on either side."""
    rec = " ".join(" ".join(f["name"] for f in e.get("frames") or []) for e in recorded)
    pred = " ".join(" ".join(f["name"] for f in e.get("frames") or []) for e in predicted)
    if "gpu_reduce_kernel" in rec:
        return "kernel workspace: the CUDA reduction's staging buffer and semaphores, inside one kernel (not traceable)"
    if "_out_cuda_impl" in rec or "resize_bytes_cuda" in rec:
        return "inside one CUDA kernel (operand copy or output resize the meta kernel does not make)"
    if recorded and not predicted and "add_Tensor" in rec:
        return "autograd added two gradients out of place here (the first still referenced); the recorder assumed in place"
    if "_engine_run_backward" in pred or "autograd" in rec:
        return ("backward: autograd or a backward formula took another path under the recording's dispatch mode "
                "(in-place vs out-of-place choice)")
    return "unexplained"


def compare(recorded: dict, program: dict, since: int, until, profile: str) -> dict:
    from allocator_ref.predict.forecast import replay_program
    from allocator_ref.trace.replay import replay
    rec_events = recorded["device_traces"][0]
    rec = [e for e in rec_events if e["action"] == "alloc"]
    pred_events = program["device_traces"][0][since:until]
    pred_allocs = [e for e in pred_events if e["action"] == "alloc"]
    pred = [e["size"] for e in pred_allocs]
    rec_sizes = [e["size"] for e in rec]
    same_place = sum(1 for a, b in zip(rec_sizes, pred) if a == b)
    matcher = difflib.SequenceMatcher(None, rec_sizes, pred, autojunk=False)
    in_order = sum(b.size for b in matcher.get_matching_blocks())
    misses = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        misses.append({"kind": tag, "recorded_at": i1, "recorded": rec_sizes[i1:i2][:4], "predicted": pred[j1:j2][:4],
                       "count": max(i2 - i1, j2 - j1),
                       "recorded_where": [_frames_hint(e) for e in rec[i1:min(i2, i1 + 2)]],
                       "predicted_where": [_frames_hint(e) for e in pred_allocs[j1:min(j2, j1 + 2)]],
                       "cause": _cause(tag, rec[i1:i2], pred_allocs[j1:j2])})
    truth = replay(recorded, verify=True, progress=False).to_json()
    run = replay_program(program, profile, since=since)
    return {"recorded_allocs": len(rec), "predicted_allocs": len(pred), "same_size_same_place": same_place,
            "matched_in_order": in_order, "misses": misses[:8], "miss_groups": len(misses),
            "all_causes": [m["cause"] for m in misses],
            "recorded_peak_allocated": truth["peak_allocated"], "recorded_peak_reserved": truth["peak_reserved"],
            "recorded_replay_exact": truth["allocs_exact"] == truth["allocs"],
            "predicted_peak_allocated": run.window_peak_allocated, "predicted_peak_reserved": run.peak_reserved}


def _small(traces: Path) -> dict | None:
    path = traces / "small-from-empty.pickle"
    if not path.is_file():
        return None
    from allocator_ref.predict.record import record_program
    from allocator_ref.trace.snapshot import load_snapshot
    from . import predict_programs as programs
    t0 = time.perf_counter()
    program = record_program(programs.small_from_empty, profile="t4-16gb")
    seconds = time.perf_counter() - t0
    row = compare(load_snapshot(path), program, 0, None, "t4-16gb")
    return {"trace": path.name, "program": "silmont2000/assignment2-systems trace_peak_memory.py (rewritten)",
            "profile": "t4-16gb (a pre-Hopper GPU: the 8,519,680 B cuBLAS workspace in the file says so)",
            "record_seconds": round(seconds, 2), **row}


def _medium(traces: Path) -> dict | None:
    path = traces / "cs336-medium-128-training.pickle"
    from . import predict_programs as programs
    clone = programs.medium_clone()
    if not path.is_file():
        return None
    if clone is None:
        return {"trace": path.name, "skipped": "no clone of Wedsonlin/assignment2-systems (set CS336_MEDIUM_CLONE)"}
    try:
        basics = programs.import_cs336_basics(clone)
    except Exception as exc:          # its imports (einops, einx, jaxtyping) missing, or the commit absent
        return {"trace": path.name, "skipped": f"cannot import that commit's cs336_basics: {exc}"}
    from allocator_ref.predict.record import mark, record_program
    from allocator_ref.trace.snapshot import load_snapshot
    t0 = time.perf_counter()
    # The file's two live 8,519,680-byte blocks are cuBLAS workspaces of a pre-Hopper GPU: its size
    # is not recorded, and nothing ran out of memory, so any pre-Hopper profile serves (t4-16gb).
    program = record_program(lambda: programs.medium_training(basics, mark), profile="t4-16gb")
    seconds = time.perf_counter() - t0
    since, until = program["predict_marks"]
    row = compare(load_snapshot(path), program, since, until, "t4-16gb")
    return {"trace": path.name, "program": "Wedsonlin/assignment2-systems nsys_profile.py memory_profile, its own "
            "cs336_basics (5 warm-up steps, then the recorded step)",
            "profile": "t4-16gb (a pre-Hopper GPU, as the file's 8,519,680 B cuBLAS workspaces say; its size is not recorded)",
            "record_seconds": round(seconds, 2), **row}


def memtracker_peak(forward_only: bool) -> int:
    """What a user would pick instead: PyTorch's MemTracker (torch/distributed/_tools/mem_tracker.py)
    on the same program on meta tensors.  It counts live tensor storages, so its peak is the peak
    allocated, with no allocator: no rounding, no cached blocks, no segments."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker
    from . import predict_programs as programs
    meta = torch.device("meta")
    with meta:
        model = programs.cs336_gpt_model(2560, 32, 10240, 10_000, 128, 32, 10_000, meta)
    optimizer = programs.cs336_adamw(model.parameters())
    batch = torch.randint(0, 10_000, (4, 128), device=meta)
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        logits = model(batch)
        if not forward_only:
            programs.cs336_cross_entropy(logits, batch).backward()
            optimizer.step()
    return int(tracker.get_tracker_snapshot("peak")[meta]["Total"])


def _cs336_gpt(traces: Path, name: str, forward_only: bool) -> dict | None:
    """kkaitlyn111/cs336-a2-systems' 2.7B model, context 128: one forward, or one full step, each the
    first run of its process (see predict_programs.cs336_gpt_memory_run for the evidence)."""
    path = traces / name
    if not path.is_file():
        return None
    from allocator_ref.predict.record import record_program
    from allocator_ref.trace.snapshot import load_snapshot
    from . import predict_programs as programs
    t0 = time.perf_counter()
    program = record_program(programs.cs336_gpt_memory_run, 128, forward_only=forward_only, profile="h100-80gb")
    seconds = time.perf_counter() - t0
    window = program["predict_windows"][0]        # the script's own _record_memory_history window
    row = compare(load_snapshot(path), program, window["start"], window["stop"], "h100-80gb")
    return {"trace": path.name, "program": "kkaitlyn111/cs336-a2-systems cs336_systems/benchmark.py "
            "run_memory_foward_fullstep (2.7B, context 128, float32), its cs336_basics model and AdamW "
            "written again as a stand-in (einops and jaxtyping not installed)",
            "profile": "h100-80gb (the file's 33,554,432 B cuBLAS workspace is Hopper's default)",
            "record_seconds": round(seconds, 2), "memtracker_peak": memtracker_peak(forward_only), **row}


# Snapshots in ../shared/traces this benchmark does not predict, and why (a row each in the table).
NOT_PREDICTED = {
    "hf-finetune-expandable-oom.pickle": "a Hugging Face Trainer fine-tune whose model and data are not in the "
        "repository (weights from a hub): nothing to run",
    "multistream-select-n.pickle": "ten CUDA streams: the recorder puts everything on one stream",
}


def _not_predicted(traces: Path) -> list:
    return [{"trace": name, "skipped": why} for name, why in NOT_PREDICTED.items() if (traces / name).is_file()]


def _gpt2_medium_timing(quick: bool) -> dict:
    from allocator_ref.predict.forecast import forecast
    from allocator_ref.predict.record import record_program
    from . import predict_programs as programs
    batch, seq = (1, 128) if quick else (8, 1024)
    t0 = time.perf_counter()
    program = record_program(programs.gpt2_medium_step, batch_size=batch, seq_len=seq)
    t1 = time.perf_counter()
    prediction = forecast(program, "h100-80gb", what_if=False)
    t2 = time.perf_counter()
    return {"batch_size": batch, "seq_len": seq, "record_s": round(t1 - t0, 2), "replay_s": round(t2 - t1, 2),
            "total_s": round(t2 - t0, 2), "target_s": TARGET_SECONDS, "met": (t2 - t0) < TARGET_SECONDS,
            "allocations": sum(1 for e in program["device_traces"][0] if e["action"] == "alloc"),
            "peak_allocated": prediction.peak_allocated, "peak_reserved": prediction.peak_reserved}


def _replay_scaling(quick: bool) -> list:
    """Seconds to replay a program whose memory only grows (every allocation a new peak): linear
    now (the blocks live at the peak are found once, after the pass); the replay used to copy
    its live table at each new peak, quadratic in exactly this case."""
    from allocator_ref.predict.forecast import replay_program
    rows = []
    for n in ((2_000, 4_000) if quick else (10_000, 20_000, 40_000)):
        events = [{"action": "alloc", "addr": 4096 * i, "size": 512, "stream": 0} for i in range(n)]
        program = {"segments": [], "device_traces": [events], "allocator_settings": {}}
        t0 = time.perf_counter()
        replay_program(program, "h100-80gb")
        rows.append({"allocations": n, "seconds": round(time.perf_counter() - t0, 3)})
    return rows


def markdown(rows: list, timing: dict, scaling: list | None = None) -> str:
    lines = ["# Predicted vs recorded (allocator_ref.predict)", "",
             "| trace | allocations recorded / predicted | same size, same place | matched in order | "
             "peak allocated recorded / predicted | peak reserved recorded / predicted (error) |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['trace']} | not predicted: {r['skipped']} | | | | |")
            continue
        err = (r["predicted_peak_reserved"] - r["recorded_peak_reserved"]) / r["recorded_peak_reserved"]
        lines.append(f"| {r['trace']} | {r['recorded_allocs']:,} / {r['predicted_allocs']:,} | "
                     f"{r['same_size_same_place']:,} | {r['matched_in_order']:,} | "
                     f"{r['recorded_peak_allocated'] / MiB:,.1f} / {r['predicted_peak_allocated'] / MiB:,.1f} MiB | "
                     f"{r['recorded_peak_reserved'] / MiB:,.1f} / {r['predicted_peak_reserved'] / MiB:,.1f} MiB "
                     f"({100 * err:+.2f}%) |")
    for r in rows:
        if r.get("memtracker_peak"):
            err = (r["memtracker_peak"] - r["recorded_peak_reserved"]) / r["recorded_peak_reserved"]
            lines += ["", f"MemTracker on {r['trace']} (meta tensors, no allocator): peak {r['memtracker_peak'] / MiB:,.1f} "
                      f"MiB, {100 * err:+.2f}% of the recorded peak reserved."]
    for r in rows:
        if r.get("misses"):
            causes: dict = {}
            for m in r["all_causes"]:
                causes[m] = causes.get(m, 0) + 1
            lines += ["", f"Misses in {r['trace']}: {r['miss_groups']} groups, by cause: "
                      + "; ".join(f"{n} x {c}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1])) + ".",
                      "First ones:", ""]
            for m in r["misses"]:
                lines.append(f"- [{m['cause']}] {m['kind']} at recorded allocation {m['recorded_at']}: recorded {m['recorded']} "
                             f"predicted {m['predicted']} (x{m['count']}); "
                             + (f"recorded at {'; '.join(m['recorded_where'])}" if m["recorded_where"]
                                else f"predicted at {'; '.join(m['predicted_where'])}"))
    if timing:
        lines += ["", f"GPT-2-medium-sized training step (batch {timing['batch_size']}, sequence {timing['seq_len']}): "
                  f"recorded in {timing['record_s']} s, replayed in {timing['replay_s']} s, total {timing['total_s']} s "
                  f"(target {timing['target_s']} s: {'met' if timing['met'] else 'NOT met'}); "
                  f"{timing['allocations']:,} allocations, predicted peak reserved {timing['peak_reserved'] / MiB:,.0f} MiB."]
    if scaling:
        lines += ["", "Replay of a program whose memory only grows (each allocation a new peak): "
                  + ", ".join(f"{r['allocations']:,} allocations in {r['seconds']} s" for r in scaling)
                  + " (linear: twice the allocations, about twice the time)."]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, traces_dir=None, out_dir=None) -> dict:
    try:
        import torch  # noqa: F401
    except ImportError:
        return {"skipped": "torch is not installed (pip install torch; the CPU wheel is enough)"}
    traces = Path(traces_dir) if traces_dir else TRACES
    slow = [] if quick else [_medium(traces), _cs336_gpt(traces, "cs336-gpt-ctx128-forward.pickle", True),
                             _cs336_gpt(traces, "cs336-gpt-ctx128-fullstep.pickle", False)]
    rows = [r for r in (_small(traces), *slow) if r is not None]
    rows += [] if quick else _not_predicted(traces)
    timing = _gpt2_medium_timing(quick)
    scaling = _replay_scaling(quick)
    out = {"quick": quick, "rows": rows, "gpt2_medium": timing, "replay_scaling": scaling}
    write_result("predict", out, out_dir)
    (Path(out_dir) if out_dir else RESULTS).joinpath("predict.md").write_text(markdown(rows, timing, scaling))
    return out


if __name__ == "__main__":
    import json
    print(json.dumps(run(), indent=1, default=str)[:4000])
    print((RESULTS / "predict.md").read_text())
