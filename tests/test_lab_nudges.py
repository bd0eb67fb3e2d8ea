"""A failed check's first nudge points where the learner's mistake is: a crash gets the crash nudge (not
the exercise's rule), and a whole PYTORCH_CUDA_ALLOC_CONF=... line gets told to return its value (not
steered to another option). Each wrong answer is a file in labs/wrong/ that a learner wrote."""
import importlib
import importlib.util
from pathlib import Path

import pytest

from allocator_ref.labs import check
from allocator_ref.labs.check import CRASH_NUDGE, exercise

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _first_attempt(monkeypatch):
    """The nudge follows the attempt count of this kernel: other tests' checks must not count here."""
    monkeypatch.setattr(importlib.import_module("allocator_ref.labs.check"), "_ATTEMPTS", {})


def _submission(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "labs" / "wrong" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_crash_gets_the_crash_nudge_before_the_exercise_rule():
    wrong = _submission("lab1_measure_use_after_free")
    result = check(wrong.EXERCISE, wrong.SUBMISSION, seed=1, verbose=False)
    assert not result.passed
    assert result.explanation.startswith("your code raised"), result.explanation
    assert result.hint.startswith(f"Nudge: {CRASH_NUDGE}"), result.hint
    assert all(str(n) not in result.hint for n in exercise("lab1.measure").nudge)


def test_an_environment_line_is_told_to_return_its_value():
    wrong = _submission("lab4_config_env_line")
    result = check(wrong.EXERCISE, wrong.SUBMISSION, seed=1, verbose=False)
    assert not result.passed
    assert "'expandable_segments:True'" in result.explanation
    assert "max_split" not in result.explanation + result.hint
    assert "after the = sign" in result.explanation, result.explanation


def test_every_exercise_has_its_own_second_nudge():
    """A second failed attempt gets a nudge about this exercise, not the generic 'work it by hand'."""
    framework = importlib.import_module("allocator_ref.labs.check")
    framework._load_all()
    for ex in framework.EXERCISES.values():
        steps = framework.nudges(ex)
        assert len(steps) >= 3 and steps[1] is not framework.SECOND_NUDGE, f"{ex.id}: add a second nudge of its own"


def test_the_second_attempt_shows_the_second_nudge():
    wrong = _submission("lab2_round_size_one_division")
    first = check(wrong.EXERCISE, wrong.SUBMISSION, seed=1, verbose=False)
    second = check(wrong.EXERCISE, wrong.SUBMISSION, seed=1, verbose=False)
    own = exercise("lab2.round_size").nudge
    assert str(own[0]) in first.hint and str(own[1]) not in first.hint, first.hint
    assert str(own[1]) in second.hint and str(importlib.import_module("allocator_ref.labs.check").SECOND_NUDGE) not in second.hint, second.hint


def test_from_the_third_attempt_the_recipe_is_named_once(capsys):
    """The attempt line names hint() and show_solution(); the closing '(... gives the full recipe)' line
    would say it a second time."""
    wrong = _submission("lab2_round_size_one_division")
    for _ in range(3):
        check(wrong.EXERCISE, wrong.SUBMISSION, seed=1)
    third = capsys.readouterr().out.split("lab2.round_size: ")[-1]
    assert third.count("hint('lab2.round_size')") == 1, third
