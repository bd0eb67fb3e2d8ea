"""Shared helpers: machine description, result files, trace discovery."""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
# ../shared/traces from the repo root (never copied in); ALLOCATOR_REF_TRACES points elsewhere
TRACES = Path(os.environ.get("ALLOCATOR_REF_TRACES") or REPO.parent / "shared" / "traces")


def machine() -> dict:
    """Where the figures were measured."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        # A shared machine's other work slows every figure: say how busy it was.
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def write_result(name: str, payload: dict, out_dir: Optional[Path] = None) -> Path:
    """Write ``<out_dir>/<name>.json`` with the machine description added."""
    out_dir = Path(out_dir) if out_dir is not None else RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {"benchmark": name, "machine": machine(), **payload}
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    return path


def trace_paths(traces_dir: Optional[Path] = None) -> list[Path]:
    """The real snapshot pickles, or [] (with a printed reason) when they are absent."""
    d = Path(traces_dir) if traces_dir is not None else TRACES
    paths = sorted(d.glob("*.pickle")) if d.is_dir() else []
    if not paths:
        print(f"[bench] no real traces under {d}: skipping the trace benchmarks "
              "(they read ../shared/traces relative to the repository root)")
    return paths
