"""check() speaks the learner's language: a Chinese learner reads its feedback, nudges and recipe in
Chinese (ALLOCATOR_REF_LANG=zh, or a notebook whose kernel starts in a Chinese edition folder), a graded
check's clean process is told that language, and the instructor's recorded verdicts stay in English.
English stays the default, word for word (tests/test_lab_nudges.py and make check-labs read it).

Each wrong answer is a file in labs/wrong/ that a learner wrote; the English left in the Chinese report
is measured with the editions' own rule (catalog.english_runs: code, numbers and names may stay)."""
import contextlib
import importlib
import importlib.util
import io
import json
import re
from pathlib import Path

import pytest

from allocator_ref.editions import language as lang
from allocator_ref.editions.catalog import english_runs
from allocator_ref.editions.messages import say
from sandbox_helpers import use_grader_python

check_module = importlib.import_module("allocator_ref.labs.check")
check = check_module.check

ROOT = Path(__file__).resolve().parents[1]
CJK = re.compile(r"[\u4e00-\u9fff]")
# One wrong answer per lab, each failing a different way (a value, a workload, a crash, a leak, a peer process).
WRONG = ["lab1_measure_use_after_free", "lab2_should_split_ge", "lab2_merge_forgets_ptr",
         "lab3_event_free_before_wait", "lab4_config_env_line", "lab5_forgets_set_access",
         "lab6_read_at_segment_base", "lab7_largest_free_sums_segment", "lab8_free_ignores_open_pools", "lab9_ignores_pending"]


@pytest.fixture(autouse=True)
def _first_attempt_in_english(plain_language, monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("ALLOCATOR_REF_LAB_QUICK", "1")
    monkeypatch.setattr(check_module, "_ATTEMPTS", {})     # the nudge follows the attempt: start at the first
    monkeypatch.setattr(check_module, "_STATUS", {})


def _wrong(name):
    path = ROOT / "labs" / "wrong" / f"{name}.py"
    if not path.exists():
        pytest.skip(f"{path.name} is not in labs/wrong any more: pick another wrong answer of that lab")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(exercise_id, submission, attempts=3, **kwargs):
    """What a learner reads after ``attempts`` failed checks, the last one with the recipe, then hint()."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for attempt in range(attempts):
            result = check(exercise_id, submission, seed=1, hint=attempt == attempts - 1, **kwargs)
        check_module.hint(exercise_id)
    return result, out.getvalue()


def _english_left(text):
    return english_runs(text)


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_answer_gets_chinese_feedback_from_the_variable(monkeypatch, name):
    wrong = _wrong(name)
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "zh")
    result, text = _report(wrong.EXERCISE, wrong.SUBMISSION)
    assert not result.passed
    assert CJK.search(result.explanation) and CJK.search(result.hint), (result.explanation, result.hint)
    assert "提示：" in text and "完整做法：" in text, text
    assert not _english_left(text), f"English sentences left in the Chinese report: {_english_left(text)}\n{text}"


def test_english_stays_the_default_word_for_word():
    wrong = _wrong("lab2_should_split_ge")
    result, text = _report(wrong.EXERCISE, wrong.SUBMISSION)
    assert not CJK.search(text), text
    assert wrong.EXPECTED_REASON in result.explanation
    assert "Nudge: " in text and "Recipe: " in text and "FAIL" in text


def test_a_notebook_in_the_chinese_edition_folder_gets_chinese(monkeypatch, tmp_path):
    """A notebook's kernel starts in its folder: labs/student/zh holds the marker the build writes."""
    folder = ROOT / "labs" / "student" / "zh"
    if not (folder / lang.MARKER).exists():
        pytest.skip("no labs/student/zh/.course-language: run python -m allocator_ref.editions build")
    monkeypatch.chdir(folder)
    wrong = _wrong("lab2_round_size_off_by_one")
    result, text = _report(wrong.EXERCISE, wrong.SUBMISSION, attempts=1)
    assert not result.passed and CJK.search(result.explanation), result.explanation
    assert not _english_left(text), _english_left(text)


def test_a_crash_gets_the_chinese_crash_nudge(monkeypatch):
    wrong = _wrong("lab1_measure_use_after_free")
    with lang.speaking("zh"):
        result = check(wrong.EXERCISE, wrong.SUBMISSION, seed=1, verbose=False)
        assert result.explanation.startswith("你的代码抛出了"), result.explanation
        assert result.hint.startswith("提示：" + say("labs", check_module.CRASH_NUDGE)), result.hint
        assert say("labs", check_module.CRASH_NUDGE) != check_module.CRASH_NUDGE


def _solution(exercise_id, name):
    solutions = ROOT / "labs" / "solutions.json"
    if not solutions.exists():
        pytest.skip("no labs/solutions.json: run make student")
    namespace = {}
    exec("from allocator_ref.caching import AllocatorConfig\n" + json.loads(solutions.read_text())[exercise_id],
         namespace)
    return namespace[name]


@pytest.mark.parametrize("speak", ["en", "zh"])
def test_a_right_answer_passes_in_both_languages(speak):
    round_size = _solution("lab2.round_size", "round_size")
    with lang.speaking(speak):
        result, text = _report("lab2.round_size", round_size, attempts=1)
    assert result.passed, text
    assert ("全部" in text) == (speak == "zh") and ("cases pass" in text) == (speak == "en"), text


def test_a_graded_check_tells_its_clean_process_the_language():
    """set_language() in the notebook: no variable or folder tells the clean process, the request does."""
    wrong = _wrong("lab2_round_size_off_by_one")
    with lang.speaking("zh"):
        result = check(wrong.EXERCISE, wrong.SUBMISSION, seed=1, graded=True, verbose=False)
    assert not result.passed
    assert CJK.search(result.explanation) and not _english_left(result.explanation), result.explanation
    result = check(wrong.EXERCISE, wrong.SUBMISSION, seed=1, graded=True, verbose=False)
    assert not CJK.search(result.explanation), result.explanation


def test_the_recorded_verdicts_stay_english_for_a_chinese_room(monkeypatch, tmp_path):
    """make autograde's judge: what it records and prints for the instructor does not follow the learner."""
    from allocator_ref.labs import regrade
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "zh")
    (tmp_path / lang.MARKER).write_text("zh\n")
    monkeypatch.chdir(tmp_path)                    # the judges fork from here: a Chinese edition's folder
    checks = [regrade.GradedCheck("a", 1, [{"key": "a/0", "exercise": "lab2.round_size",
                                           "expression": "round_size", "seed": 1, "hidden": None,
                                           "time_limit": None}])]
    cells = [{"code": "def round_size(size, config):\n    return size\n"}, {"take": [["a/0", "round_size"]]}]
    verdicts = regrade.judge_notebook(cells, checks)
    passed, explanation = verdicts["a/0"]
    assert passed is False and explanation and not CJK.search(explanation), explanation


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lab02_build_the_core", "lab04_make_it_fit", "lab07_diagnose_it"])
def test_run_all_of_a_chinese_student_lab_prints_chinese_checks(name):
    """What a Chinese learner sees on opening labs/student/zh/labNN and pressing Run All: every check()
    report (stubs not written yet) in Chinese, with no English sentence left; the English lab's in English."""
    from test_notebooks import PROFILES, execute_notebook

    reports = {}
    for edition in ("zh", ""):
        path = ROOT / "labs" / "student" / edition / f"{name}.ipynb"
        run, _ = execute_notebook(path, PROFILES[0])
        reports[edition] = [out["text"] for cell in run.cells if cell.cell_type == "code"
                            and "check(" in cell.source for out in cell.get("outputs", []) if "text" in out]
        assert reports[edition], f"{path.name}: no check() output"
    chinese = "\n".join(reports["zh"])
    assert "尚未完成" in chinese and not _english_left(chinese), _english_left(chinese) or chinese
    english = "\n".join(reports[""])
    assert "not written yet" in english and not CJK.search(english), english


def test_a_title_made_at_import_is_said_in_the_language_of_the_moment():
    """Exercise titles, nudges and recipes are made once, at import (``later``), and said when shown:
    importing the labs in English and checking in Chinese (or the other way) reads the right one."""
    from allocator_ref.editions.messages import translator
    later = translator("labs", later=True)
    title = check_module.exercise("lab2.round_size").title
    assert later(title) == title and "round_size" in title
    with lang.speaking("zh"):
        assert later(title) == title                      # marked, not translated, when made
        assert CJK.search(check_module.shown(title)), check_module.shown(title)
    assert check_module.shown(title) == title
    with pytest.raises(TypeError, match="no fields"):
        later("a {n} sentence", n=1)
