"""Record real PyTorch snapshots of the chapters' workloads on a GPU, and verify them anywhere.

    python tools/record_torch_snapshots.py                # on a GPU with torch: record, then verify
    python tools/record_torch_snapshots.py --out DIR      # somewhere else
    python tools/record_torch_snapshots.py --verify DIR   # any machine: replay every pickle in DIR

Recording (needs torch with CUDA; otherwise it says why and exits 0) runs each
workload in its own Python process, so each gets a fresh caching allocator and
its own ``PYTORCH_CUDA_ALLOC_CONF``, under
``torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")``
(Python frames only: C++ symbolisation can take minutes), and writes
``<workload>.pickle`` (``torch.cuda.memory._dump_snapshot``) plus
``<workload>.json`` (torch version, GPU, config, reserved figures, the exact
OOM message where there is one, ``sorted(torch.cuda.memory_stats().keys())``):

* ``frag-native`` / ``frag-expandable``: chapter 4/5's 8 x 16 MiB then 4 x 32 MiB,
  without and with ``expandable_segments:True``;
* ``record-stream``: a block used on a side stream, ``record_stream`` and freed
  while the side stream is still busy (a cross-stream free);
* ``oom-fraction``: 256 MiB blocks until OOM under ``set_per_process_memory_fraction``;
* ``dynamic-shape``: a seeded loop of matmuls over changing sequence lengths.

Two more write only JSON (nothing to replay): ``facts`` (what
PyTorch itself reports: snapshot key sets, the memory_stats key
list, the OOM text of ``torch.empty(2**40)``, the exception of a bad setting)
and ``cudamallocasync`` (learner question Q19: the backend's name, which
features raise, which stats are filled, the same 8 x 16 / 4 x 32 pattern's
reserved figures).

The folder is ``$OUT/torch-snapshots`` when ``$OUT`` is set, else
``allocator_ref/device/profiles/measured/torch-snapshots/``.  After recording,
every pickle is replayed with ``allocator_ref.trace.replay(verify=True)``;
the exit status is non-zero on any divergence (as with ``--verify``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MiB = 1 << 20
MAX_ENTRIES = 100000
DEFAULT_DIR = ROOT / "allocator_ref" / "device" / "profiles" / "measured" / "torch-snapshots"

# name -> PYTORCH_CUDA_ALLOC_CONF it runs under (None: leave the variable unset)
WORKLOADS = {
    "frag-native": None,
    "frag-expandable": "expandable_segments:True",
    "record-stream": None,
    "oom-fraction": None,
    "dynamic-shape": None,
    "facts": None,
    "cudamallocasync": "backend:cudaMallocAsync",
}
PICKLED = ("frag-native", "frag-expandable", "record-stream", "oom-fraction", "dynamic-shape")


def default_dir() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "torch-snapshots" if out else DEFAULT_DIR


# --------------------------------------------------------------------------- workloads (GPU only)
def _frag(torch, info: dict) -> None:
    xs = [torch.empty(16 * MiB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    info["reserved_after_8x16"] = torch.cuda.memory_reserved()
    del xs
    ys = [torch.empty(32 * MiB, dtype=torch.uint8, device="cuda") for _ in range(4)]
    info["reserved_after_4x32"] = torch.cuda.memory_reserved()
    info["segments_after_4x32"] = torch.cuda.memory_stats().get("segment.all.current")
    del ys


def _record_stream(torch, info: dict) -> None:
    side = torch.cuda.Stream()
    x = torch.full((8 * MiB,), 1, dtype=torch.uint8, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)                # keep the side stream busy (~tens of ms)
        y = x + 1                                    # x used on the side stream
    x.record_stream(side)
    del x                                            # free_requested now, completed when side passes
    z = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")     # cannot reuse x yet
    side.synchronize()
    w = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")     # x's block is free again
    info["reused_after_sync"] = True
    del y, z, w
    torch.cuda.synchronize()


def _oom_fraction(torch, info: dict) -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = (1 << 30) / total                     # a 1 GiB budget on any GPU
    torch.cuda.set_per_process_memory_fraction(fraction)
    info["fraction"] = fraction
    held = []
    try:
        for _ in range(64):
            held.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as e:
        info["oom_message"] = str(e)
        info["blocks_before_oom"] = len(held)
    del held


def _dynamic_shape(torch, info: dict) -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    lengths = torch.randint(64, 2048, (40,), generator=gen).tolist()
    for seq in lengths:
        x = torch.randn(8, seq, 1024, device="cuda", dtype=torch.float16)
        y = (x @ w).relu()
        loss = y.float().sum()
        del x, y, loss
    info["lengths"] = lengths
    info["peak_reserved"] = torch.cuda.max_memory_reserved()
    info["peak_allocated"] = torch.cuda.max_memory_allocated()
    del w


def _try(fn) -> str:
    try:
        fn()
        return "ok"
    except Exception as e:                           # record the exact class and text
        return f"{type(e).__name__}: {e}"


def _facts(torch, info: dict) -> None:
    torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")
    keep = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
    tmp = torch.empty(1000, device="cuda")
    del tmp
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    seg = snap["segments"][0] if snap["segments"] else {}
    trace = next((t for t in snap.get("device_traces", []) if t), [])
    info["snapshot_keys"] = sorted(snap)
    info["segment_keys"] = sorted(seg)
    info["block_keys"] = sorted(seg["blocks"][0]) if seg.get("blocks") else []
    info["trace_entry_keys"] = sorted(trace[0]) if trace else []
    info["allocator_settings"] = {k: repr(v) for k, v in snap.get("allocator_settings", {}).items()}
    try:
        torch.empty(2**40, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        info["oom_message_empty_2_40"] = str(e)
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None) or torch.cuda.memory._set_allocator_settings
    info["bad_settings"] = {s: _try(lambda s=s: setter(s))
                            for s in ("max_split_size_mb:2", "garbage_collection_threshold:1.2", "foo:1")}
    del keep


def _cudamallocasync(torch, info: dict) -> None:
    info["backend"] = torch.cuda.memory.get_allocator_backend()
    info["record_memory_history"] = _try(lambda: torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES))
    info["snapshot"] = _try(torch.cuda.memory._snapshot)
    _frag(torch, info)
    stats = torch.cuda.memory_stats()
    info["memory_stats_nonzero_keys"] = sorted(k for k, v in stats.items() if v)
    info["expandable_segments_setting"] = _try(
        lambda: torch.cuda.memory._set_allocator_settings("expandable_segments:True"))


BODIES = {"frag-native": _frag, "frag-expandable": _frag, "record-stream": _record_stream,
          "oom-fraction": _oom_fraction, "dynamic-shape": _dynamic_shape, "facts": _facts,
          "cudamallocasync": _cudamallocasync}


def worker(name: str, out: Path) -> int:
    """One workload in this (fresh) process: the pickle and the JSON next to it."""
    import torch
    info = {"workload": name, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
            "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
            "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            "recorded_with": f"_record_memory_history(max_entries={MAX_ENTRIES}, stacks='python')"}
    torch.cuda.init()
    if name in PICKLED:
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")
    BODIES[name](torch, info)
    if name in PICKLED:
        torch.cuda.memory._dump_snapshot(str(out / f"{name}.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    info["memory_stats_keys"] = sorted(torch.cuda.memory_stats().keys())
    (out / f"{name}.json").write_text(json.dumps(info, indent=2) + "\n")
    return 0


def torch_cuda_reason() -> str:
    """'' when torch sees a CUDA GPU, else why not."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA GPU"
    return ""


def record(out: Path, names: list[str]) -> int:
    reason = torch_cuda_reason()
    if reason:
        print(f"record_torch_snapshots: skipped, {reason} (needs torch with CUDA on a GPU)")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in names:
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.pop("PYTORCH_ALLOC_CONF", None)
        if WORKLOADS[name]:
            env["PYTORCH_CUDA_ALLOC_CONF"] = WORKLOADS[name]
        t0 = time.perf_counter()
        try:
            run = subprocess.run([sys.executable, __file__, "--worker", name, "--out", str(out)], env=env,
                                 capture_output=True, text=True, timeout=240)
            rc, tail = run.returncode, (run.stdout + run.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            rc, tail = "timeout", ""
        print(f"{name:18} rc={rc} {time.perf_counter() - t0:6.1f} s")
        if rc != 0:
            failed.append(name)
            print(tail)
    status = verify(out)
    if failed:
        print(f"record_torch_snapshots: workloads that failed: {', '.join(failed)}")
    return status or (1 if failed else 0)


# --------------------------------------------------------------------------- verify (any machine)
def verify(folder: Path) -> int:
    """Replay every pickle in ``folder`` with verify=True; 0 when all are exact, 1 otherwise."""
    from allocator_ref.__main__ import _print_replay
    from allocator_ref.trace.replay import replay

    pickles = sorted(Path(folder).glob("*.pickle"))
    if not pickles:
        print(f"record_torch_snapshots --verify: no *.pickle in {folder}")
        return 2
    diverged = []
    for path in pickles:
        try:
            result = replay(path, verify=True, progress=False)
        except Exception as e:                       # an unreadable snapshot is a failure, said plainly
            print(f"{path}: could not be replayed: {type(e).__name__}: {e}")
            diverged.append(path.name)
            continue
        _print_replay(result)
        if not result.perfect:
            diverged.append(path.name)
    print(f"record_torch_snapshots --verify: {len(pickles) - len(diverged)}/{len(pickles)} snapshots "
          f"replayed exactly{'' if not diverged else '; diverged: ' + ', '.join(diverged)}")
    return 1 if diverged else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verify", type=Path, metavar="DIR", help="replay every pickle in DIR with verify=True")
    ap.add_argument("--out", type=Path, help="output folder (default $OUT/torch-snapshots or profiles/measured/torch-snapshots)")
    ap.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), help="record only these workloads")
    ap.add_argument("--worker", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.verify:
        return verify(args.verify)
    out = args.out or default_dir()
    if args.worker:
        return worker(args.worker, out)
    return record(out, args.only or list(WORKLOADS))


if __name__ == "__main__":
    sys.exit(main())
