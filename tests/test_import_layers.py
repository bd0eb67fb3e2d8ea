"""Imports run down the layers, never back up between folders.

``caching/`` records trace events, so the event vocabulary (``allocator_ref/events.py``) sits
below it; ``trace/`` replays on ``caching/`` and may import it, never the other way round.
Read from the source with ``ast`` (nothing is imported to check)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "allocator_ref"

# lower number = lower layer; a module may import from its own unit or a lower one
# The event vocabulary (events.py: the actions and which ones take or give back memory) imports
# nothing and sits with the device: device/sizing.py sizes a simulated GPU from a trace's events.
# provenance.py (the course's mark on the snapshots it records) imports nothing either: caching/ writes
# it, trace/ reads it.
# processes.py (ending what a runner started: labs' judges and check(), predict) imports nothing of ours.
LAYERS = {"settings": 0, "processes": 0, "device": 1, "allocation": 2, "front_door": 2, "events": 1, "provenance": 1,
          "vmm": 2, "caching": 3,
          "policies": 4, "sharing": 4, "trace": 5, "viz": 6, "memory_doctor": 7, "labs": 8,
          "integrations": 8, "predict": 8, "editions": 9, "__main__": 9}
# No exception: make_allocator, which may build any design, lives above them all in
# policies/registry.py, so the caching package never imports a policy.
ALLOWED: set = set()
# Which language the tools speak (editions/language.py, messages.py) reads only settings: every tool
# at every layer asks it (the doctor's report, check()'s feedback), so it sits just above settings.  The
# command lines' parser (editions/cli_words.py: --help and argparse's errors in that language) reads only
# those two, and the labs' command lines (layer 8) build it.
LOW_MODULES = {"allocator_ref.editions.language": 1, "allocator_ref.editions.messages": 1,
               "allocator_ref.editions.cli_words": 1}


def _unit(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path):
    rel = path.relative_to(ROOT.parent).with_suffix("")
    package = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                yield f"{target}.{alias.name}" if target == "allocator_ref" else target
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def test_no_import_runs_back_up_between_folders():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts == ("__init__.py",):
            continue                     # the package's front door re-exports every layer
        here = rel.parts[0].removesuffix(".py")
        for target in _imports(path):
            if not target.startswith("allocator_ref."):
                continue
            there = _unit(target)
            if there == here or (rel.as_posix(), there) in ALLOWED or there not in LAYERS:
                continue
            if LOW_MODULES.get(target, LAYERS[there]) > LAYERS[here]:
                upward.append(f"{rel.as_posix()} imports {target} ({here} -> {there})")
    assert not upward, "imports that run back up:\n" + "\n".join(upward)


def test_the_language_modules_read_only_settings():
    for name in LOW_MODULES:
        path = ROOT.parent / (name.replace(".", "/") + ".py")
        below = {t for t in _imports(path) if t.startswith("allocator_ref.")
                 and _unit(t) not in ("settings", "editions")}
        inside = {t for t in _imports(path) if _unit(t) == "editions"} - set(LOW_MODULES)
        assert not below and not inside, f"{name} imports {below | inside}: it must stay below every tool"


def test_caching_records_events_from_below_it():
    source = (ROOT / "caching" / "allocator.py").read_text(encoding="utf-8")
    assert "from ..events import" in source and "..trace" not in source


# The doctor's facts are read off the replay engine (trace/verify_facts.py); only the drawing side
# (report.py's player and frames_of, html_report.py, charts.py) may import viz.  Issue 49.
FACT_MODULES = ("memory_doctor.diagnosis", "memory_doctor.replay_facts", "memory_doctor.remedies",
                "memory_doctor.capacity", "memory_doctor.shortage", "memory_doctor.unchanged",
                "trace.verify_facts")
# (state.py reads a snapshot with no trace: no replay, and its StateReport draws like report.py.)


def _module_path(dotted: str):
    base = ROOT.parent / dotted.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def test_the_doctors_facts_import_nothing_from_viz():
    """Every module the facts come from, and everything those import in turn (at any depth,
    inside functions too), stays out of allocator_ref.viz."""
    reached: dict = {}                   # module -> the module that imported it
    todo = [f"allocator_ref.{name}" for name in FACT_MODULES]
    for name in todo:
        reached.setdefault(name, None)
    while todo:
        name = todo.pop()
        path = _module_path(name)
        if path is None:                 # a name imported from a module, not a module
            continue
        for target in _imports(path):
            if target.startswith("allocator_ref.") and target not in reached:
                reached[target] = name
                todo.append(target)
    viz = sorted(f"{reached[t]} imports {t}" for t in reached if _unit(t) == "viz")
    assert not viz, "the doctor's facts reach viz:\n" + "\n".join(viz)
