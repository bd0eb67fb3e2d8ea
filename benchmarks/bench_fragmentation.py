"""Fragmentation: peak reserved / peak allocated for each allocator design.

Designs: the native caching allocator, caching with ``expandable_segments:True``,
the stream-ordered (cudaMallocAsync) pool, BFC and direct cudaMalloc.  Workloads:
the real traces in ../shared/traces (``replay(..., verify=False, policy=...)``)
and a generated, seeded dynamic-shape training loop (the sequence length changes
every step, so activation sizes never repeat exactly).
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Optional

from allocator_ref.device import SimDevice
from allocator_ref.policies.registry import make_allocator, policy_names
from allocator_ref.trace.replay import replay
from allocator_ref.trace.snapshot import load_snapshot

from .common import trace_paths, write_result

DESIGNS = [  # (column name, policy, config): the caching allocator twice, then every registered design
    ("native", "caching", ""),
    ("expandable", "caching", "expandable_segments:True"),
    *((name, name, "") for name in policy_names() if name != "caching"),
]
QUICK_TRACES = ("small-from-empty", "cs336-gpt-ctx128-forward")


def dynamic_shape_workload(seed: int = 0, steps: int = 24, layers: int = 12, hidden: int = 1024,
                           heads: int = 16, batch: int = 8, max_seq: int = 1024) -> list:
    """A seeded training loop as ("malloc", id, nbytes) / ("free", id) ops.

    Weights and optimizer state live throughout; each step draws a sequence
    length, keeps per-layer activations (fp16: q/k/v, attention scores, MLP)
    until the backward pass frees them in reverse, with short-lived gradient
    temporaries in between.
    """
    rng = random.Random(seed)
    ops, ids = [], iter(range(1 << 60))

    def malloc(nbytes: int) -> int:
        i = next(ids)
        ops.append(("malloc", i, nbytes))
        return i

    per_layer_weights = 12 * hidden * hidden * 2
    for _ in range(layers):
        for _copy in range(4):            # weights, grads, Adam m and v
            malloc(per_layer_weights)
    for _ in range(steps):
        seq = rng.randrange(32, max_seq + 1, 8)
        tok = batch * seq * hidden * 2
        saved = []
        for _ in range(layers):
            saved += [malloc(tok) for _ in range(4)]            # input, q, k, v
            saved.append(malloc(batch * heads * seq * seq * 2))  # attention probabilities
            saved.append(malloc(tok * 4))                        # MLP up
            tmp = malloc(tok * 4)                                # activation temp
            ops.append(("free", tmp))
        logits = malloc(batch * seq * 50304 * 2 // 8)
        ops.append(("free", logits))
        for _ in range(layers):
            grad = malloc(tok * 4)
            for _k in range(6):
                ops.append(("free", saved.pop()))
            ops.append(("free", grad))
    return ops


def run_ops(ops: list, policy: str, config: str, profile: str = "h100-80gb") -> dict:
    dev = SimDevice(profile)
    alloc = make_allocator(dev, policy, config)
    live = {}
    for op in ops:
        if op[0] == "malloc":
            live[op[1]] = alloc.malloc(op[2])
        else:
            alloc.free(live.pop(op[1]))
    out = {"peak_reserved": alloc.max_memory_reserved(), "peak_allocated": alloc.max_memory_allocated(),
           "device_calls": None}
    for a in live.values():
        alloc.free(a)
    dev.close()
    return out


def _ratio(row: dict) -> Optional[float]:
    return row["peak_reserved"] / row["peak_allocated"] if row.get("peak_allocated") else None


def run(quick: bool = False, traces_dir: Optional[Path] = None, out_dir=None) -> dict:
    t0 = time.perf_counter()
    workloads = {}
    for path in trace_paths(traces_dir):
        if quick and path.stem not in QUICK_TRACES:
            continue
        snap = load_snapshot(path)
        cells = {}
        for name, policy, config in DESIGNS:
            try:
                j = replay(snap, verify=False, policy=policy, config=config or None, progress=False).to_json()
                cells[name] = {"peak_reserved": j["peak_reserved"], "peak_allocated": j["peak_allocated"]}
            except Exception as exc:                    # report, keep the table going
                cells[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        workloads[path.stem] = cells
    steps = 4 if quick else 24
    ops = dynamic_shape_workload(seed=0, steps=steps)
    workloads["generated-dynamic-shape"] = {
        name: run_ops(ops, policy, config) for name, policy, config in DESIGNS}
    for cells in workloads.values():
        for cell in cells.values():
            if "peak_allocated" in cell:
                cell["ratio"] = _ratio(cell)
    table = {w: {d: cells[d].get("ratio") for d, _, _ in DESIGNS} for w, cells in workloads.items()}
    for w, row in table.items():
        print(f"[fragmentation] {w:<34} " + "  ".join(
            f"{d} {'-' if v is None else f'{v:.3f}'}" for d, v in row.items()), flush=True)
    payload = {
        "quick": quick,
        "metric": "peak reserved / peak allocated (1.0 = no fragmentation or rounding waste)",
        "designs": [{"name": n, "policy": p, "config": c} for n, p, c in DESIGNS],
        "generated_workload": {"seed": 0, "steps": steps, "ops": len(ops)},
        "workloads": workloads,
        "table": table,
        "elapsed_s": time.perf_counter() - t0,
    }
    write_result("fragmentation", payload, out_dir)
    return payload


if __name__ == "__main__":
    run()
