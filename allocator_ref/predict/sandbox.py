"""``python -m allocator_ref predict SCRIPT``: the user's script recorded in a bounded subprocess.

Predicting RUNS THE USER'S CODE (that is how a meta-tensor recording works), so it never
happens implicitly and never in this process: a child Python imports SCRIPT with
``runpy.run_path`` (its ``if __name__ == "__main__":`` block does not run), calls the
function it names (``step`` by default) with the knobs given, and writes the recorded
programs to a JSON file.  The child runs with an address-space limit (``RLIMIT_AS``),
in its own process group, and is killed with that group when it runs past the timeout
(and when it ends: nothing it started in its group outlives it).  Its output goes to a file,
never a pipe, so that no process it starts can keep this one waiting.
The replay on the reference allocator then happens here, on plain data.
"""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from .. import processes
from ..editions.messages import translator

tr = translator("doctor")
DEFAULT_TIMEOUT_S = 300.0
_CHILD_MAIN = "import sys; del sys.path[0]; from allocator_ref.predict.sandbox import _child; sys.exit(_child())"
DEFAULT_MEMORY_GIB = 16.0     # address space, not resident memory: importing torch maps several GiB


def parse_knob(text: str) -> tuple[str, object]:
    """``--set batch_size=16`` -> ("batch_size", 16); a value that is no Python literal stays a string."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise ValueError(f"--set {text!r}: write NAME=VALUE, e.g. --set batch_size=16")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def record_in_subprocess(script: str, entry: str, knobs: dict, sweep: Optional[str], values: list,
                         profile: str, timeout: float = DEFAULT_TIMEOUT_S,
                         memory_gib: float = DEFAULT_MEMORY_GIB) -> dict:
    """Run the script's ``entry`` in a child and return {"program": ..., "sweep": [(value, program)]}."""
    path = Path(script)
    if not path.is_file():
        raise ValueError(f"{script!r} is not a file: give the Python script that defines {entry}(...)")
    with tempfile.TemporaryDirectory(prefix="allocator-ref-predict-") as tmp:
        out, job_file, log_file = Path(tmp) / "programs.json", Path(tmp) / "job.json", Path(tmp) / "output.txt"
        job_file.write_text(json.dumps({"script": str(path.resolve()), "entry": entry, "knobs": knobs,
                                        "sweep": sweep, "values": values, "profile": profile, "out": str(out),
                                        "memory_gib": memory_gib}))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                       os.environ.get("PYTHONPATH")])))
        # This process becomes a subreaper: what the script starts and orphans (setsid, a double fork)
        # is re-parented here, not to init, so it is ended with the rest; the caller's own children
        # (before) are not.
        before = frozenset(processes.children())
        reaping = not processes.is_subreaper() and processes.subreaper()
        # Its output goes to a file, not a pipe: a process the script starts would hold a pipe open
        # after the script ended, and reading it to its end would wait for that process, past any
        # timeout.  Waiting on the child itself ends by the deadline.
        with open(log_file, "w+") as log:
            # The child drops its working directory (the script's folder) from the front of sys.path
            # (what -P does on Python 3.11+), so a torch.py or allocator_ref/ there cannot stand in
            # for the real ones; the script's folder joins sys.path only after torch is imported.
            child = subprocess.Popen([sys.executable, "-c", _CHILD_MAIN, str(job_file)],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     cwd=str(path.resolve().parent), start_new_session=True)
            try:
                child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _end(child)
                raise ValueError(f"{script}: {entry}() ran past the {timeout:g} s limit and was stopped; a "
                                 "meta-tensor step takes seconds: look for a loop that never ends, or raise "
                                 "--timeout") from None
            finally:
                _end(child)                        # what the script started in its process group, too
                processes.end_descendants(skip=before)   # ... and what left that group (setsid, double fork)
                if reaping:
                    processes.subreaper(False)
            log.seek(0)
            output = log.read()[-20_000:]
        if child.returncode != 0 or not out.is_file():
            lines = output.strip().splitlines()
            tail = " | ".join(lines[-3:]) or f"exit status {child.returncode}"
            if child.returncode is not None and child.returncode < 0:
                tail = f"killed by signal {-child.returncode} ({tail})"
            if lines and lines[-1].startswith("MemoryError"):
                raise ValueError(f"{script}: {entry}() ran out of memory: the script may map {memory_gib:g} GiB "
                                 f"(--memory-limit) and asked for more ({tail[:1000]}); a meta-tensor step "
                                 "allocates no tensor memory, so look for a host-side allocation, or raise "
                                 "--memory-limit")
            raise ValueError(f"{script}: recording {entry}() failed: {tail[:1500]}")
        return json.loads(out.read_text())


def _end(child: subprocess.Popen) -> None:
    """Kill the child's process group (the script and what it started) and reap the child."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:                                # already gone
        pass
    child.wait()


def _limit_memory(gib: float) -> None:
    import resource
    limit = int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _child() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    _limit_memory(job["memory_gib"])
    try:
        import torch  # noqa: F401     (before the script's folder joins sys.path: its torch.py cannot shadow this)
    except ImportError:
        print("predict needs PyTorch (the CPU wheel is enough): pip install torch", file=sys.stderr)
        return 3
    import runpy
    from .caveats import NoAnswer
    from .record import record_program, script_stand_ins
    sys.path.insert(0, os.path.dirname(job["script"]))
    try:
        with script_stand_ins(job["profile"]):         # `from torch import autocast` at import time sees the stand-in
            namespace = runpy.run_path(job["script"], run_name="__allocator_ref_predict__")
        step = namespace.get(job["entry"])
        if not callable(step):
            print(f"the script defines no function {job['entry']}(); name it with --entry", file=sys.stderr)
            return 4
        result = {"program": record_program(step, profile=job["profile"], **job["knobs"]), "sweep": []}
        for value in job["values"]:
            program = record_program(step, profile=job["profile"], stacks=False,
                                     **{**job["knobs"], job["sweep"]: value})
            result["sweep"].append([value, program])
    except NoAnswer as exc:
        print(str(exc), file=sys.stderr)
        return 5
    except Exception as exc:                 # a torch.cuda object or call the CPU build has no stand-in for
        refusal = _cannot_emulate(exc)
        if refusal is None:
            raise
        print(refusal, file=sys.stderr)
        return 5
    Path(job["out"]).write_text(json.dumps(result))
    return 0


def _cannot_emulate(exc: BaseException):
    """A torch.cuda call or object with no stand-in (``torch.cuda.Stream()``, ``Event()``, a query)
    failed inside torch on the CPU build ("Torch not compiled with CUDA enabled", "requires CUDA
    support", a dummy base class): name the script's line instead of torch's internals.  None when
    the error is not that (the script's own error is reported as it is)."""
    import traceback
    frames = traceback.extract_tb(exc.__traceback__)
    torch_dir = os.sep + "torch" + os.sep
    mine = [f for f in frames if torch_dir not in f.filename and "allocator_ref" not in f.filename
            and f.filename != "<string>"]
    if not mine or not frames or torch_dir not in frames[-1].filename or "cuda" not in (mine[-1].line or ""):
        return None
    where = f"{os.path.basename(mine[-1].filename)}:{mine[-1].lineno}"
    return tr("predict cannot emulate {call} (called at {where}) without a GPU; take it out of the step "
              "that predict records", call=f"`{mine[-1].line.strip()}`", where=where)


if __name__ == "__main__":
    sys.exit(_child())
