"""Every name in ``allocator_ref.__all__`` means the same thing whatever was imported before.

The bug this guards against: ``ar.replay`` was resolved through the package
``allocator_ref.trace``, whose attribute ``replay`` Python rebinds to the
submodule ``allocator_ref/trace/replay.py`` as soon as anything imports that
submodule (chapter 7's player does).  A learner's next ``ar.replay(snap)``
then failed with "'module' object is not callable".

Each check runs in a fresh interpreter, because the first lookup of a lazy
name is cached in the package: only a new process sees the import order anew.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Import every submodule first (skipping the CUDA-only and command-line ones
# would hide nothing: they import cleanly without a GPU), then look up each
# public name and report what it is.
PROBE = r"""
import importlib, pkgutil, sys, types
import allocator_ref
order = sys.argv[1]
if order == "submodules-first":
    for info in pkgutil.walk_packages(allocator_ref.__path__, "allocator_ref."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
bad = []
for name in allocator_ref.__all__:
    if name == "__version__":
        continue
    value = getattr(allocator_ref, name)
    if isinstance(value, types.ModuleType) or not callable(value):
        bad.append(f"{name} -> {value!r}")
print("BAD:" + ";".join(bad))
print("REPLAY:" + allocator_ref.replay.__module__ + "." + allocator_ref.replay.__qualname__)
"""


def _probe(order: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", PROBE, order], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)


@pytest.mark.parametrize("order", ["names-first", "submodules-first"])
def test_every_public_name_is_a_function_or_class_in_any_import_order(order):
    result = _probe(order)
    assert result["BAD"] == "", f"after importing {order}: public names that are not callables: {result['BAD']}"
    assert result["REPLAY"] == "allocator_ref.trace.replay.replay"


def test_replay_after_the_player_import_replays():
    """The learner's path: chapter 7 imports the frames module, then calls ar.replay on a snapshot."""
    code = ("import allocator_ref.viz.replay_frames, allocator_ref as ar\n"
            "dev = ar.SimDevice('tiny-1gb'); a = ar.CachingAllocator(dev)\n"
            "a.record_memory_history()\n"
            "x = a.malloc(5 << 20); y = a.malloc(1 << 20); a.free(x); a.free(y)\n"
            "r = ar.replay(a.snapshot(), verify=True, progress=False)\n"
            "print(r.to_json()['allocs_exact'], r.to_json()['allocs'])")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    exact, total = out.stdout.split()[-2:]
    assert int(total) == 2 and exact == total, out.stdout
