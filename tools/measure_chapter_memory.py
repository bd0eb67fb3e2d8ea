"""Peak memory of each chapter's kernel on the simulated device: what a learner's server needs.

    python tools/measure_chapter_memory.py        # writes workshop/chapter-memory.json

Runs every chapters/*.ipynb top to bottom (ALLOCATOR_REF_DEVICE=sim, `gpu` cells left out,
as the CI runs them), then asks the kernel for its peak resident memory
(getrusage(RUSAGE_SELF).ru_maxrss) and that of the processes it waited for
(RUSAGE_CHILDREN: chapter 6's second process).  workshop/z2jh-values.yaml sizes the
per-learner memory guarantee and limit from the heaviest chapter plus the Jupyter
server itself (measured the same way: the server process of the local hub).
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "workshop" / "chapter-memory.json"
PEAK = ("import resource, json\n"
        "print(json.dumps([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,\n"
        "                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")


def measure(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if "gpu" not in c.get("metadata", {}).get("tags", [])]
    nb.cells.append(nbformat.v4.new_code_cell(PEAK))
    env = {**os.environ, "ALLOCATOR_REF_DEVICE": "sim", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    os.environ.update(env)                  # the kernel inherits this process's environment
    start = time.monotonic()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    self_kib, children_kib = json.loads(nb.cells[-1].outputs[0]["text"])
    return {"kernel_peak_mib": round(self_kib / 1024, 1),
            "child_processes_peak_mib": round(children_kib / 1024, 1),
            "seconds": round(time.monotonic() - start, 1)}


def measure_server() -> float:
    """Resident memory (MiB) of an idle JupyterLab server with this environment's extensions."""
    import socket
    import subprocess
    import psutil
    import requests
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(Path(sys.executable).parent / "jupyter-lab"), "--no-browser",
                             "--allow-root", f"--port={port}", "--ServerApp.token=measure",
                             "--ServerApp.ip=127.0.0.1"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                if requests.get(f"http://127.0.0.1:{port}/api/status?token=measure", timeout=2).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.5)
        requests.get(f"http://127.0.0.1:{port}/lab?token=measure", timeout=30)   # load the UI once
        time.sleep(2)
        return round(psutil.Process(proc.pid).memory_info().rss / 2**20, 1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    chapters = {p.stem: measure(p) for p in sorted((ROOT / "chapters").glob("*.ipynb"))}
    server = measure_server()
    heaviest = max(chapters, key=lambda k: chapters[k]["kernel_peak_mib"]
                   + chapters[k]["child_processes_peak_mib"])
    OUT.write_text(json.dumps({
        "what": "peak resident memory of each chapter's kernel on the simulated device",
        "how": "python tools/measure_chapter_memory.py (getrusage ru_maxrss after Run All)",
        "measured_on": f"{date.today()} {platform.platform()} python {platform.python_version()}",
        "heaviest": heaviest, "server_idle_mib": server, "chapters": chapters}, indent=2) + "\n")
    for name, m in chapters.items():
        print(f"{name:40} {m['kernel_peak_mib']:7.1f} MiB  (+{m['child_processes_peak_mib']} MiB children)"
              f"  {m['seconds']} s")
    print(f"JupyterLab server, idle: {server} MiB")
    print(f"heaviest: {heaviest}; written to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
