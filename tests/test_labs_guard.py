"""check() cannot be fooled or broken by accident, gives away only what the hint policy allows,
and can plug a learner's function into every decision it names.

The hostile submissions here are the ones a learner writes without meaning harm: an object whose
``__eq__`` answers True, ``sys.exit()``, an exception that cannot be printed, an endless loop, a
flood of prints, a patched reference class, an output written from the host.
"""
from __future__ import annotations

import importlib
import json
import random
import sys
from pathlib import Path

import pytest

from allocator_ref.caching.device_caching_allocator import DeviceCachingAllocator as LiveDeviceAllocator
from allocator_ref.caching import device_caching_allocator as allocator_module
from allocator_ref.labs import check, hint
from allocator_ref.labs.check import SAY_WHERE_THE_RECIPE_IS_AFTER, exercise, lab_modules
from allocator_ref.labs.guard import run_guarded, same, show
from allocator_ref.labs.plug import HOOKS, PluggedAllocator
from allocator_ref.labs.workload import compare, random_workload

check_module = importlib.import_module("allocator_ref.labs.check")
ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


class AlwaysEqual:
    """Equal to everything, unequal to nothing: the accidental 'mock' answer."""
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")


@pytest.fixture(autouse=True)
def fresh_attempts(monkeypatch):
    monkeypatch.setattr(check_module, "_ATTEMPTS", {})


# ------------------------------------------------------------------ comparisons
def test_same_compares_type_and_value_recursively():
    assert same({"a": [1, (2, "x")]}, {"a": [1, (2, "x")]})
    assert not same(True, 1) and not same(1.0, 1) and not same(AlwaysEqual(), 5)
    assert not same({"a": AlwaysEqual()}, {"a": 5}) and not same([AlwaysEqual()], [5])


@pytest.mark.parametrize("exercise_id, answer", [
    ("lab1.explain", lambda dev, nbytes, kernel_us: AlwaysEqual()),
    ("lab4.diagnose", lambda stats, snapshot, request, free: {"reserved_but_unallocated": AlwaysEqual(),
                                                              "largest_free_block": AlwaysEqual(),
                                                              "cause": AlwaysEqual()}),
    ("lab7.peaks", lambda snapshot: {"peak_requested": AlwaysEqual(), "peak_reserved": AlwaysEqual()}),
    ("lab7.largest_free", lambda snapshot: AlwaysEqual()),
    ("lab2.round_size", lambda size, config: AlwaysEqual()),
])
def test_an_object_equal_to_everything_passes_nothing(exercise_id, answer):
    result = check(exercise_id, answer, seed=1, hidden=1, verbose=False)
    assert not any(c.passed for c in result.cases), result.cases


# ------------------------------------------------------------------ nothing escapes a case
def test_sys_exit_and_unprintable_exceptions_are_reported_not_raised():
    def exits(size, config):
        sys.exit(3)
    result = check("lab2.round_size", exits, seed=1, hidden=1, verbose=False)
    assert not result.passed and "sys.exit(3)" in result.explanation

    def raises(size, config):
        raise Unprintable()
    result = check("lab2.round_size", raises, seed=1, hidden=1, verbose=False)
    assert "Unprintable" in result.explanation and "could not be printed" in result.explanation
    assert "<a " in show(type("R", (), {"__repr__": lambda self: 1 / 0})())


def test_an_endless_loop_is_stopped_and_the_rest_is_not_run(capsys):
    def spins(size, config):
        while True:
            pass
    result = check("lab2.round_size", spins, seed=1, time_limit=0.3)
    out = capsys.readouterr().out
    assert not result.passed and "stopped after 0.3 s" in out
    assert result.cases[0].stopped and all(c.explanation.startswith("not run") for c in result.cases[1:])


def test_an_earlier_timer_survives_a_guarded_case():
    import signal
    if not hasattr(signal, "setitimer"):
        pytest.skip("no setitimer on this platform")
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        run_guarded(lambda: None, 5)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < left <= 30, "the timer set before the case (pytest-timeout's) was lost"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_flood_of_output_is_capped_and_said(capsys):
    def chatty(size, config):
        print("x" * 100_000)
        return 512
    check("lab2.round_size", chatty, seed=1, hidden=0)
    out = capsys.readouterr().out
    import re
    printed = re.search(r"output cut: your code printed ([\d,]+) characters", out)
    assert printed and int(printed.group(1).replace(",", "")) >= 100_001
    assert len(out) < 20_000


# ------------------------------------------------------------------ private reference copies
def test_patching_the_reference_class_or_module_does_not_make_a_wrong_answer_pass(monkeypatch):
    wrong = importlib.import_module("allocator_ref.labs.verify").load_wrong(
        ROOT / "labs" / "wrong" / "lab2_should_split_ge.py").SUBMISSION
    monkeypatch.setattr(LiveDeviceAllocator, "should_split",
                        lambda self, block, size, exp: wrong(block, size, exp, self.config))
    assert not check("lab2.should_split", wrong, seed=1, verbose=False).passed

    off_by_one = importlib.import_module("allocator_ref.labs.verify").load_wrong(
        ROOT / "labs" / "wrong" / "lab2_round_size_off_by_one.py").SUBMISSION
    monkeypatch.setattr(allocator_module, "round_size", off_by_one)
    monkeypatch.setattr(importlib.import_module("allocator_ref.caching.config"), "round_size", off_by_one)
    assert not check("lab2.round_size", off_by_one, seed=1, verbose=False).passed


# ------------------------------------------------------------------ the hint policy
def _stub(size, config):
    raise NotImplementedError("write your solution here")


def _wrong(size, config):
    return size                                  # forgets to round


def test_an_untouched_stub_is_told_only_what_to_do(capsys):
    result = check("lab2.round_size", _stub, seed=2)
    out = capsys.readouterr().out
    assert result.untouched and "What to write" in out
    recipe = exercise("lab2.round_size").hint
    assert recipe not in out and "Nudge" not in out and "Recipe" not in out
    assert out.count("FAIL") == 1, "a stub gets one line, not a wall of failures"


def _nudge_lines(out: str) -> list:
    return [line for line in out.splitlines() if line.startswith("Nudge:")]


def test_a_failed_attempt_gets_a_nudge_that_changes_and_never_the_recipe_unasked(capsys):
    """Each failed attempt gets the located explanation and a nudge; the nudge changes from one attempt
    to the next; after several the report says where the recipe is, but never prints it by itself."""
    recipe = exercise("lab2.round_size").hint
    seen = []
    for attempt in range(1, SAY_WHERE_THE_RECIPE_IS_AFTER + 3):
        check("lab2.round_size", _wrong, seed=2, hidden=0)
        out = capsys.readouterr().out
        assert "round_size(1)" in out and recipe not in out, f"attempt {attempt} printed the recipe unasked"
        seen.append(tuple(_nudge_lines(out)))
        if attempt >= SAY_WHERE_THE_RECIPE_IS_AFTER:
            assert "show_solution('lab2.round_size')" in out and "hint('lab2.round_size')" in out
    assert seen[0] and seen[1] and seen[0] != seen[1], f"the second attempt got the same nudge: {seen[:2]}"


def test_the_recipe_on_request(capsys):
    recipe = exercise("lab2.round_size").hint
    check("lab2.round_size", _wrong, seed=2, hidden=0, hint=True)
    assert recipe in capsys.readouterr().out
    assert hint("lab2.round_size") == recipe


def test_every_exercise_has_a_nudge_shorter_than_its_recipe():
    check_module._load_all()
    for ex in check_module.EXERCISES.values():
        own = ex.nudge if isinstance(ex.nudge, (list, tuple)) else (ex.nudge,)   # one nudge, or one per attempt
        assert own and all(n and len(n) < len(ex.hint) for n in own), f"{ex.id}: write a nudge (where to look, not how)"


# ------------------------------------------------------------------ plug any decision
def _hook_workloads():
    """Workloads that between them reach every decision: events, OOM pressure with max_split_size,
    the garbage collector, expandable segments."""
    rng = random.Random(5)
    events = random_workload(rng, 60, streams=2, events=True) + [("empty_cache",)]
    pressure = [("malloc", f"a{i}", 100 * MiB, 0) for i in range(8)] + [("free", f"a{i}") for i in range(8)]
    pressure += [("malloc", f"b{i}", 150 * MiB, 0) for i in range(5)]
    return [(events, "", "h100-80gb"),
            (pressure, "max_split_size_mb:64", "tiny-1gb"),
            (pressure, "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9", "tiny-1gb"),
            (random_workload(rng, 40), "expandable_segments:True", "h100-80gb")]


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_pluggable_decision_is_called_and_the_reference_behaviour_plugged_in_agrees(name):
    calls = []
    short = {"round_size": lambda a: lambda size, config: a.round_size(size),
             "get_allocation_size": lambda a: lambda size, config: a.get_allocation_size(size),
             "should_split": lambda a: lambda block, size, exp, config: a.should_split(block, size, exp),
             "try_merge_blocks": lambda a: lambda dst, src, pool: a.try_merge_blocks(dst, src, pool)}

    def make(dev, config):
        reference = importlib.import_module("allocator_ref.labs.reference")
        # a second instance, only to borrow the member's body
        ref_for_calls = reference.CachingAllocator(dev, config).device_allocator
        if name in short:
            inner = short[name](ref_for_calls)

            def learner(*args):
                calls.append(args)
                return inner(*args)
        else:
            method = getattr(reference.DeviceCachingAllocator, name)

            def learner(allocator, *args, **kwargs):
                calls.append(args)
                return method(allocator, *args, **kwargs)
        return PluggedAllocator(dev, config, plug={name: learner})

    for ops, config, profile in _hook_workloads():
        try:
            compare(ops, lambda dev, config=config: make(dev, config), profile=profile, config=config,
                    what=f"the reference's own {name}")
        except Exception as exc:         # the workload may run out of memory: both sides do the same
            if type(exc).__name__ != "OutOfMemoryError":
                raise
    assert calls, f"no workload reaches {name}: add one to _hook_workloads"


def test_every_plug_point_is_the_device_caching_allocator_member_it_replaces():
    """A hook's name is a DeviceCachingAllocator member (PyTorch's), and plugging replaces that
    member on the allocator's device_allocator, nowhere else."""
    from allocator_ref.device import SimDevice
    foreign = sorted(n for n in HOOKS if n not in vars(LiveDeviceAllocator))
    assert not foreign, f"plug points that are not DeviceCachingAllocator members: {foreign}"
    for name in HOOKS:
        plugged = PluggedAllocator(SimDevice("tiny-1gb"), plug={name: lambda *args: None})
        assert name in vars(plugged.device_allocator) and name not in vars(plugged), name


def test_plugging_an_unknown_decision_names_the_ones_that_exist():
    from allocator_ref.device import SimDevice
    with pytest.raises(ValueError, match="get_free_block"):
        PluggedAllocator(SimDevice("tiny-1gb"), plug={"choose_block": lambda *a: None})


def test_a_new_decision_can_be_an_exercise_without_touching_the_reference():
    """get_free_block's max_split_size rules, written by a 'learner' that forgets them, are caught."""
    reference = importlib.import_module("allocator_ref.labs.reference").DeviceCachingAllocator

    def forgets_max_split(allocator, p):
        block = p.pool.best_fit(p.stream_key, p.size)
        if block is None or block.stream_key != p.stream_key:
            return False
        p.pool.remove(block)
        p.block = block
        return True
    ops = [("malloc", "a", 100 * MiB, 0), ("free", "a"), ("malloc", "b", 2 * MiB, 0)]
    from allocator_ref.labs.check import Fail
    with pytest.raises(Fail, match="op 2"):
        compare(ops, None, config="max_split_size_mb:64", plug={"get_free_block": forgets_max_split})
    compare(ops, None, config="max_split_size_mb:64",
            plug={"get_free_block": lambda a, p: reference.get_free_block(a, p)})


# ------------------------------------------------------------------ discovery, solutions
def test_lab_modules_are_found_on_disk_and_an_unknown_id_says_how_to_add_it():
    on_disk = sorted(p.stem for p in (ROOT / "allocator_ref" / "labs").glob("lab*.py") if p.stem[3:].isdigit())
    assert sorted(lab_modules()) == on_disk
    with pytest.raises(KeyError, match=r"register\(Exercise\(id='lab9.x'"):
        exercise("lab9.x")


def test_the_installed_package_carries_no_solution_file():
    """show_solution() reads labs/solutions.json in the course folder; the package (what `pip install .`
    ships, package data included) holds neither that file nor any solution cell's text.  (The reference
    allocator itself is, by design, what lab 2 rebuilds: that is the course, not a solution file.)"""
    solutions = json.loads((ROOT / "labs" / "solutions.json").read_text())
    cells = [text.strip() for text in solutions.values()]
    assert len(cells) >= 10
    for path in (ROOT / "allocator_ref").rglob("*"):
        if path.is_file() and path.suffix not in (".pyc",):
            assert "solution" not in path.name, f"{path.relative_to(ROOT)}: solutions belong in labs/"
            text = path.read_text(errors="replace")
            leaked = [c.splitlines()[0] for c in cells if c in text]
            assert not leaked, f"{path.relative_to(ROOT)} holds a solution cell: {leaked[:2]}"


def test_show_solution_without_the_course_folder_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(check_module, "SOLUTIONS_FILE", tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="graded installation has none"):
        check_module.solution_text("lab2.round_size")


def test_a_merge_that_leaves_state_broken_is_explained_where_it_happened():
    def half_merge(dst, src, pool):          # links nothing, only grows dst
        if src is None or src.allocated or src.event_count or src.stream_uses:
            return 0
        dst.size += src.size
        return src.size
    result = check("lab2.merge", half_merge, seed=1, hidden=0, verbose=False)
    assert not result.passed
    assert "still in the pool" in result.explanation or "linked" in result.explanation, result.explanation
    assert "sortedlist" not in result.explanation and "not in list" not in result.explanation


def test_a_declared_function_exercise_judges_exactly_and_hides_hidden_values(monkeypatch):
    from allocator_ref.labs.spec import function_exercise
    check_module._load_all()
    monkeypatch.setitem(check_module.EXERCISES, "lab9.triple", None)
    function_exercise(id="lab9.triple", lab=9, title="triple(n)", reference=lambda n: 3 * n,
                      public=[(2,)], hidden=lambda rng: [(rng.randint(10, 99),) for _ in range(2)],
                      explain=lambda args, expected: f"three times {args[0]}", nudge="n", hint="3 n")
    assert check("lab9.triple", lambda n: 3 * n, seed=1, verbose=False).passed
    as_float = check("lab9.triple", lambda n: 3.0 * n, seed=1, verbose=False)
    assert not as_float.passed and "(float instead of int)" in as_float.explanation
    off = check("lab9.triple", lambda n: 3 * n if n < 10 else 3 * n + 1, seed=1, verbose=False)
    assert off.cases[0].passed and not off.passed
    hidden_text = " ".join(c.explanation for c in off.cases if c.hidden)
    assert "expected" not in hidden_text and not any(str(3 * k + 1) in hidden_text for k in range(10, 100))


def test_the_sticky_stop_lets_a_finalizer_the_garbage_collector_runs_finish():
    # A device freed by the garbage collector while a stopped case's code still runs gives back its
    # shared segments in weakref.finalize; the stop must not cut that cleanup short.  The learner's
    # own frames (a finalizer callback of theirs included) are still stopped.
    import types
    import weakref
    from allocator_ref.labs.guard import CaseTimeout, _Sticky
    sticky = _Sticky()
    sticky.error = CaseTimeout

    def frame_of(filename):
        return types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=filename))
    assert sticky.trace(frame_of(weakref.__file__), "line", None) == sticky.trace
    with pytest.raises(CaseTimeout):
        sticky.trace(frame_of("/home/learner/notebook.py"), "line", None)



def test_the_sticky_stop_leaves_a_garbage_collector_callback_alone():
    # A library's gc.callbacks function (hypothesis, a profiler) runs at whatever line a collection
    # starts, the stopped learner's loop included.  Raising there stops nothing: the collector
    # swallows it and prints "Exception ignored in ..." (once a pytest warning in this file).  The
    # callback, and what it calls, run on; the learner's own next line is still stopped.
    import gc
    import sys
    from allocator_ref.labs.guard import CaseTimeout, _Sticky
    sticky = _Sticky()
    sticky.error = CaseTimeout
    seen = []

    def helper_of_the_library():
        try:
            sticky.trace(sys._getframe(), "call", None)
            seen.append("helper ran")
        except CaseTimeout:
            seen.append("helper stopped")

    def library_gc_callback(phase, info):
        try:
            sticky.trace(sys._getframe(), "line", None)
            seen.append("callback ran")
        except CaseTimeout:
            seen.append("callback stopped")
        helper_of_the_library()

    gc.callbacks.append(library_gc_callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(library_gc_callback)
    assert seen and set(seen) == {"callback ran", "helper ran"}, seen
    with pytest.raises(CaseTimeout):                          # the learner's own frame: stopped
        sticky.trace(sys._getframe(), "line", None)
