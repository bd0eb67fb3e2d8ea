"""The engine's shape, checked from the source and by use: one place says which actions take or
give back memory, "did not reproduce" is a type that every language falls back on, and one loop
(the runner's) replays every Program: what-if rows, replays without --verify and predict.

Read with ``ast`` (nothing imported to count); the language test runs the command line."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.events import ACTIONS, NEW_MEMORY, RELEASES, RESERVED_CHANGE, USER_CALLS
from allocator_ref.memory_doctor import what_if
from allocator_ref.trace.replay_report import DidNotReproduce

ROOT = Path(__file__).resolve().parents[1] / "allocator_ref"
MiB = 2**20


def _literals(path: Path):
    """(line, the strings) of every tuple, list, set or dict-keys literal in a file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        yield node.lineno, {e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def places_naming(actions: set, under=("",)) -> list:
    """Where a literal names all of ``actions`` but is no per-action table (one entry for every action)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(under):
            continue
        for line, strings in _literals(path):
            if actions <= strings and not set(ACTIONS) <= strings:
                found.append(f"{rel}:{line}")
    return found


def test_one_place_names_the_actions_that_release_memory():
    assert places_naming({"segment_free", "segment_unmap"}) == ["events.py:%d" % _line("RELEASES")]


def test_the_engine_names_new_memory_and_user_calls_only_through_events():
    # The trace engine, the device sizing and the vocabulary: one definition each (events.py).
    under = ("trace/", "device/", "events.py")
    assert places_naming({"segment_alloc", "segment_map"}, under) == ["events.py:%d" % _line("NEW_MEMORY")]
    assert places_naming({"alloc", "free_requested"}, under) == ["events.py:%d" % _line("USER_CALLS")]


def test_no_module_defines_its_own_copy_of_the_vocabulary():
    copies = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                if names & {"RELEASES", "NEW_MEMORY", "USER_CALLS", "GROWS"} and path.name != "events.py":
                    copies.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert copies == []


def test_every_named_action_is_an_action():
    from allocator_ref.events import ANNOUNCES, EXPANDABLE, FAILED_CALL
    named = set(NEW_MEMORY) | set(RELEASES) | set(USER_CALLS) | set(ANNOUNCES) | set(EXPANDABLE) | {FAILED_CALL}
    assert named <= set(ACTIONS) and set(RESERVED_CHANGE) == set(NEW_MEMORY) | set(RELEASES)


def test_the_vocabulary_says_what_each_action_does_to_memory_reserved():
    # Replay a course run and sum the trace with RESERVED_CHANGE: it must land on memory_reserved().
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "expandable_segments:True")
    a.record_memory_history(max_entries=100_000)
    held = [a.malloc((k % 4 + 1) * 7 * MiB) for k in range(20)]
    for x in held[::2]:
        a.free(x)
    a.free(a.malloc(200 * MiB))
    a.empty_cache()                                          # unmaps the 200 MiB of pages
    trace = a.snapshot()["device_traces"][0]
    assert {e["action"] for e in trace} >= set(NEW_MEMORY[1:]) | set(RELEASES[1:]) | set(USER_CALLS)
    assert sum(RESERVED_CHANGE.get(e["action"], 0) * e["size"] for e in trace) == a.memory_reserved()


def _line(name: str) -> int:
    tree = ast.parse((ROOT / "events.py").read_text(encoding="utf-8"))
    return next(n.value.lineno for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in n.targets))


# ---------------------------------------------------------------- one place gives announced events their effect

def _listens(tree) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_listener"
               for n in ast.walk(tree))


def _compared_strings(function) -> set:
    """The strings a function compares something with (``action == "segment_free"``, ``in (...)``)."""
    found = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found.update(e.value for e in ast.walk(side) if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return found


def places_correcting_for_an_announcement() -> list:
    """Modules with a function that branches on two or more of the events reported before their change.

    Looked for where the allocator is read while it reports an event: every module that registers a
    trace listener, the drawing layer (viz/) they hand their readings to, and the vocabulary.  Naming
    one such action is telling a trace's story (a lifetime ends at free_completed); giving them their
    effect branches on several."""
    from allocator_ref.events import ANNOUNCED_BEFORE
    places = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not (_listens(tree) or rel.startswith("viz/") or rel == "events.py"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and len(_compared_strings(node) & set(ANNOUNCED_BEFORE)) >= 2:
                places.add(rel)
    return sorted(places)


def test_one_place_gives_the_events_announced_before_their_change_their_effect():
    # The frames, the follower, the timeline, the live view and the doctor's totals all read the
    # state after an event through events.after_event / totals_after_event; none corrects on its own.
    assert places_correcting_for_an_announcement() == ["events.py"]


def test_after_event_turns_the_state_read_at_a_report_into_the_state_after_it():
    # The last event of a free is its free_completed, of empty_cache a segment_free: read while they
    # are reported, the block map still lacks their change, and after_event supplies it.
    from allocator_ref.events import ANNOUNCED_BEFORE, after_event
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    late, seen = [], []

    def listener(entry):
        seen.append((entry.to_dict(), a.segments(record=False)))
    stop = a.trace.add_listener(listener)
    held = [a.malloc((k % 3 + 1) * 5 * MiB) for k in range(6)]
    for x in held[1::2] + held[::2]:
        a.free(x)
        event, at_report = seen[-1]
        after = a.segments(record=False)
        if at_report != after:
            late.append(event["action"])
        segment = next((s for s in at_report if s["address"] <= event["addr"] < s["address"] + s["total_size"]), None)
        fixed = [s for s in at_report if s is not segment] + [s for s in [after_event(event, segment)] if s]
        assert sorted(fixed, key=lambda s: s["address"]) == after
    a.empty_cache()
    stop()
    event, at_report = seen[-1]
    after = a.segments(record=False)
    assert event["action"] == "segment_free" and at_report != after
    assert [s for s in at_report if after_event(event, s) is not None] == after
    assert set(late) == {"free_completed"} <= set(ANNOUNCED_BEFORE)


# ---------------------------------------------------------------- "did not reproduce" is a type

def diverged_run() -> dict:
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    a.record_memory_history(max_entries=100_000)
    held = [a.malloc((k % 5 + 1) * MiB) for k in range(60)]
    for x in held[::3]:
        a.free(x)
    snap = a.snapshot()
    events = snap["device_traces"][0]
    k = next(i for i, e in enumerate(events) if e["action"] == "alloc" and i > 30)
    events[k] = dict(events[k], addr=events[k]["addr"] + 512)      # PyTorch "chose" another address
    return snap


def test_what_if_raises_the_type_on_a_run_it_does_not_reproduce():
    with pytest.raises(DidNotReproduce) as err:
        what_if(diverged_run())
    assert err.value.index is not None and err.value.index > 30


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_compare_falls_back_to_plain_replays_in_every_language(lang, tmp_path, capsys):
    path = ar.save_snapshot(diverged_run(), tmp_path / "diverged.pickle")
    assert main(["compare", str(path), "--lang", lang, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) > 1 and not any(r["anchored"] for r in rows)
    assert main(["compare", str(path), "--lang", lang]) == 0        # the table, in that language
    assert str(path) in capsys.readouterr().out


# ---------------------------------------------------------------- one verifier, one runner

# The loops that replay a recording: the verifier's (it checks PyTorch's decisions and yields the
# Program) and the runner's (it replays a Program on any design and capacity); predict had its own.
VERIFIER, RUNNER, PREDICT = "Engine._run_until", "Runner._run_actions", "replay_program"
START = "Runner._restore_start"          # the runner putting back the state at the first event


def loops_that_malloc(work) -> dict:
    """Which replay loop made each allocator malloc while ``work()`` ran: {loop: mallocs}.
    Read off the call stack of every ``malloc`` call (a profile hook), nothing patched."""
    import sys
    from collections import Counter
    found: Counter = Counter()
    named = (VERIFIER, RUNNER, PREDICT, START)

    def watch(frame, event, _arg):
        if event != "call" or frame.f_code.co_name != "malloc" or "allocator_ref" not in frame.f_code.co_filename:
            return
        f = frame.f_back
        while f is not None and f.f_code.co_qualname not in named:
            if f.f_code.co_name == "malloc" and "allocator_ref" in f.f_code.co_filename:
                return                   # a malloc inside a malloc (a policy's own): counted once
            f = f.f_back
        found[f.f_code.co_qualname if f is not None else "elsewhere"] += 1

    sys.setprofile(watch)
    try:
        work()
    finally:
        sys.setprofile(None)
    return dict(found)


def streams_run() -> dict:
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    side = a.device.create_stream()
    before = [a.malloc(3 * MiB) for _ in range(4)]
    a.record_memory_history(max_entries=100_000)          # a run recorded mid-way
    held = []
    for k in range(40):
        x = a.malloc((k % 5 + 1) * 2 * MiB)
        if k % 4 == 0:
            a.record_stream(x, side)
        held.append(x)
        if len(held) > 8:
            a.free(held.pop(0))
        if k == 20:
            a.empty_cache()
    a.free(before[0])
    return a.snapshot()


@pytest.mark.parametrize("policy", ["caching", "bfc", "stream_ordered"])
def test_a_replay_without_verify_is_the_runner(policy):
    from allocator_ref.trace.replay import replay
    config = "expandable_segments:True" if policy == "caching" else ""
    snap = streams_run()
    seen = loops_that_malloc(lambda: replay(snap, policy=policy, config=config, progress=False))
    assert set(seen) <= {RUNNER, START} and seen.get(RUNNER, 0) >= 40, seen
    assert VERIFIER not in seen


def test_the_what_if_rows_verify_and_run_every_row_on_the_runner():
    rec = load_recording_of(streams_run())
    seen = loops_that_malloc(lambda: what_if(rec, (("caching", "expandable_segments:True"), ("bfc", ""),
                                                   ("stream_ordered", ""))))
    requests = sum(1 for e in rec.device(0).events if e["action"] == "alloc")
    assert seen.get(VERIFIER, 0) >= requests          # one verify replay reads the program ...
    assert seen.get(RUNNER) == 4 * requests           # ... every row replays it: as recorded + 3
    assert set(seen) <= {VERIFIER, RUNNER, START, "elsewhere"}


def test_predict_replays_on_the_runner():
    from allocator_ref.predict.forecast import replay_program
    program = streams_run()
    seen = loops_that_malloc(lambda: replay_program(program, profile="tiny-1gb"))
    assert set(seen) == {RUNNER} and seen[RUNNER] >= 40, seen


def test_one_class_per_loop_no_mode_flags():
    # The verifier and the runner compose what they stand on (stage.py); neither takes a mode.
    import inspect
    from allocator_ref.trace.engine import Engine
    from allocator_ref.trace.runner import Runner
    assert "verify" not in inspect.signature(Engine).parameters
    assert "verify" not in inspect.signature(Runner).parameters
    assert not hasattr(Engine, "run_program") and Runner.__bases__ == (object,)


def load_recording_of(snap):
    from allocator_ref.trace.recording import load_recording
    return load_recording(snap)
