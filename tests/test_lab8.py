"""Lab 8 (own the pool): the instructor solutions pass, and each known-wrong answer in labs/wrong/
passes every PUBLIC case and is rejected by the HIDDEN cases alone (what the issue asks of lab 8)."""
from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path

import pytest

from allocator_ref.labs.check import check
from allocator_ref.labs.lab8 import reserved_after_captures

check_module = importlib.import_module("allocator_ref.labs.check")   # (the package re-exports check())
ROOT = Path(__file__).resolve().parents[1]
WRONG = sorted((ROOT / "labs" / "wrong").glob("lab8_*.py"))


def _load(path):
    spec = importlib.util.spec_from_file_location(f"wrong_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _solution(exercise_id):
    text = json.loads(check_module.SOLUTIONS_FILE.read_text())[exercise_id]
    scope: dict = {}
    exec(text, scope)
    return next(v for k, v in scope.items() if callable(v) and not k.startswith("__"))


@pytest.mark.parametrize("exercise_id", ["lab8.get_pool", "lab8.capture_order", "lab8.cross_stream_free"])
def test_solution_passes_public_and_hidden(exercise_id):
    result = check(exercise_id, _solution(exercise_id), seed=3, verbose=False)
    assert result.passed, result.explanation
    assert any(c.hidden for c in result.cases) and any(not c.hidden for c in result.cases)


@pytest.mark.parametrize("path", WRONG, ids=lambda p: p.stem)
def test_known_wrong_answer_fails_only_hidden_cases(path):
    module = _load(path)
    for seed in (1, 2):
        result = check(module.EXERCISE, module.SUBMISSION, seed=seed, verbose=False)
        public = [c for c in result.cases if not c.hidden]
        hidden = [c for c in result.cases if c.hidden]
        if not getattr(module, "PUBLIC_CATCHES", False):   # a wrong type is caught everywhere, public included
            assert public and all(c.passed for c in public), [c.explanation for c in public if not c.passed]
        assert hidden and not all(c.passed for c in hidden)
        assert module.EXPECTED_REASON in result.explanation


def test_capture_order_matters_on_the_reference_allocator():
    """The fact exercise 2 rests on, measured: largest-first reserves less than ascending."""
    assert reserved_after_captures([4, 3, 2, 1]) < reserved_after_captures([1, 2, 3, 4])


def _strict_small(captures, size, stream):
    """A near miss: exactly 1 MiB sent to the large list (the small pool takes <= 1 MiB)."""
    kind = "small" if size < 1024 * 1024 else "large"
    for pool_id, accepts in reversed(captures):
        if accepts(stream):
            return pool_id, kind
    return (0, 0), kind


def _newest_whatever_the_stream(captures, size, stream):
    """A near miss: the newest context wins even when its filter refuses the stream."""
    kind = "small" if size <= 1024 * 1024 else "large"
    return (captures[-1][0] if captures else (0, 0)), kind


@pytest.mark.parametrize("mistake", [_strict_small, _newest_whatever_the_stream], ids=lambda f: f.__name__)
@pytest.mark.parametrize("quick", ["", "1"])
def test_hidden_routing_cases_alone_catch_the_edge_mistakes(mistake, quick, monkeypatch):
    """Mistakes the public cases already show are still met by the hidden ones alone, for every seed
    and in check()'s quick mode too: the 1 MiB edge, an older entry accepting while the newest does
    not, and no entry accepting at all are drawn every time."""
    monkeypatch.setenv(check_module.QUICK_ENV, quick)
    for seed in (1, 2, 3, 4, 5):
        result = check_module.judge(check_module.exercise("lab8.get_pool"), mistake, seed, public=False)
        assert not result.passed, (mistake.__name__, seed)


def test_cross_stream_free_facts_on_the_reference_allocator():
    """Exercise 3 rests on 2.11's free/malloc branches on captures_underway (CUDACachingAllocator.cpp:
    ``free`` defers a block with stream_uses, ``malloc`` skips process_events), measured here."""
    from allocator_ref.labs.lab8 import free_outcome
    assert free_outcome(1, 0) == ("insert_events", True)
    assert free_outcome(1, 1) == ("deferred", False)
    assert free_outcome(0, 1) == ("free_block", True)
