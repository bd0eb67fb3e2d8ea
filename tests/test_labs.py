"""The labs: solutions pass, student stubs fail, known-wrong answers are rejected for the right reason.

Everything runs on the simulated device (ALLOCATOR_REF_DEVICE=sim):

* ``labs/student``, ``labs/solutions.json`` and each ``labs/source/*.ipynb`` pair are exactly what
  ``python -m allocator_ref.labs.generate`` writes now (instructors edit one file, regenerate, CI proves it);
* each student notebook equals its instructor source outside the solution regions, and holds none of
  the solution text;
* every instructor notebook executes and every check in it passes; every student notebook executes
  end to end (checks print, they do not raise) and every exercise's check fails in it;
* every file in ``labs/wrong/`` is rejected with the reason it names (``EXPECTED_REASON`` must appear
  in the explanation of the first failure), and by the hidden cases alone for several seeds;
* every exercise (not only every lab) has a solution, a check cell and a known-wrong answer;
* hidden cases differ by seed and never print their expected values.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import time
from pathlib import Path

import nbformat
import pytest

from allocator_ref.labs import generate, verify
from allocator_ref.labs.check import EXERCISES, check, exercise, resolve_seed

check_module = importlib.import_module("allocator_ref.labs.check")   # the module (the package exports the function)
ROOT = Path(__file__).resolve().parents[1]
SOURCES = generate.sources()
WRONG = sorted((ROOT / "labs" / "wrong").glob("lab*.py"))
CHECK_CALL = re.compile(r"""check\(\s*["'](lab\d+\.\w+)["']""")
TIMINGS: dict = {}


def _all_exercises() -> list:
    check_module._load_all()
    return sorted(EXERCISES)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"wrong_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ generation
def test_student_copies_are_up_to_date():
    stale = generate.stale()
    assert not stale, f"run `make student`: stale {[str(p.relative_to(ROOT)) for p in stale]}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_student_copy_differs_from_source_only_in_solution_regions(source):
    instructor = generate.read_source(source)
    student = nbformat.read(generate.STUDENT_DIR / (source.stem + ".ipynb"), as_version=4)
    kept = [c for c in instructor.cells if generate.INSTRUCTOR_TAG not in c.get("metadata", {}).get("tags", [])]
    assert len(kept) == len(student.cells)
    text = nbformat.writes(student)
    assert generate.BEGIN not in text and generate.END not in text
    for i, (src, dst) in enumerate(zip(kept, student.cells)):
        assert src.cell_type == dst.cell_type, f"cell {i}"
        assert src.get("metadata", {}).get("tags", []) == dst.get("metadata", {}).get("tags", []), f"cell {i}"
        assert not dst.get("outputs"), f"cell {i} carries outputs"
        if src.cell_type == "code" and generate.has_region(src.source):
            expected, solution, _ = generate.strip_regions(src.source)
            assert dst.source == expected, f"cell {i} differs outside its solution region"
            # no solution line (beyond trivial ones) leaks into the student copy
            removed = [ln.strip() for ln in solution.split("\n") if ln not in expected.split("\n")]
            leaked = [ln for ln in removed if len(ln) > 12 and ln in dst.source]
            assert not leaked, f"cell {i}: solution text in the student copy: {leaked}"
            assert generate.STUB in dst.source
        else:
            assert dst.source == src.source, f"cell {i} differs from the instructor source"


def test_strip_regions_keeps_indentation_and_rejects_unbalanced_markers():
    src = "# exercise: x.y\ndef f():\n    '''doc'''\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n"
    student, solution, ids = generate.strip_regions(src)
    assert student == "# exercise: x.y\ndef f():\n    '''doc'''\n    " + generate.STUB + "\n"
    assert "return 1" in solution and "BEGIN" not in solution and ids == ["x.y"]
    with pytest.raises(generate.SourceError):
        generate.strip_regions("### BEGIN SOLUTION\nx = 1\n")
    with pytest.raises(generate.SourceError):
        generate.strip_regions("x = 1\n### END SOLUTION\n")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_instructor_pair_in_sync_and_without_outputs(source):
    ipynb = source.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: make student"
    nb = nbformat.read(ipynb, as_version=4)
    md = generate.read_source(source)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in md.cells], \
        "the .ipynb and .md differ: run `make student` (it writes the .ipynb from the .md)"
    for cell in nb.cells:
        assert not cell.get("outputs") and cell.get("execution_count") is None


def test_every_exercise_has_a_solution_a_check_cell_and_a_known_wrong_answer():
    problems = verify.exercise_problems()
    assert not problems, "\n".join(problems)


def test_an_exercise_without_a_known_wrong_answer_is_reported_with_what_to_add(monkeypatch):
    from allocator_ref.labs.check import Exercise
    check_module._load_all()
    monkeypatch.setitem(EXERCISES, "lab2.brand_new", Exercise(
        id="lab2.brand_new", lab=2, title="t", public=lambda: [], hidden=lambda rng: [], hint="h"))
    problems = [p for p in verify.exercise_problems(2) if p.startswith("lab2.brand_new")]
    assert any("no known-wrong answer: add labs/wrong/lab2_" in p for p in problems), problems
    assert any("no solution region" in p for p in problems) and any("no check cell" in p for p in problems)


@pytest.mark.slow
@pytest.mark.parametrize("path", WRONG, ids=lambda p: p.stem)
def test_known_wrong_answer_is_rejected_by_the_hidden_cases_alone(path):
    verdict = verify.verify_wrong(path)
    assert not verdict.problems, "\n".join(verdict.problems)


# ------------------------------------------------------------------ the checker
@pytest.mark.parametrize("path", WRONG, ids=lambda p: p.stem)
def test_known_wrong_solution_is_rejected_for_its_reason(path):
    module = _load(path)
    result = check(module.EXERCISE, module.SUBMISSION, seed=1, verbose=False)
    assert not result.passed, f"{path.name} passed {module.EXERCISE}"
    assert module.EXPECTED_REASON in result.explanation, (
        f"{path.name}: expected the reason {module.EXPECTED_REASON!r}, got:\n{result.explanation}")


@pytest.mark.parametrize("exercise_id", _all_exercises())
def test_hidden_cases_differ_by_seed(exercise_id):
    import random
    ex = exercise(exercise_id)
    draw = lambda seed: [repr(c.data) for c in ex.hidden(random.Random(f"{ex.id}:{seed}"))]
    a, b = draw(1), draw(2)
    assert a == draw(1), "the same seed must draw the same hidden cases"
    assert a != b, "two seeds drew the same hidden cases"
    assert all(d != "None" for d in a), "every hidden case records the inputs it drew (Case.data)"


def test_hidden_failures_never_show_expected_values(capsys):
    from allocator_ref.caching import config as C

    public_sizes = set()
    for case in exercise("lab2.round_size").public():
        if isinstance(case.data, tuple):
            public_sizes |= set(case.data[0])

    def memorised(size, config):       # right on every public input, wrong elsewhere
        value = C.round_size(size, config)
        return value if size in public_sizes or size < 10_000_000 else value + 512
    result = check("lab2.round_size", memorised, seed=7)
    out = capsys.readouterr().out
    hidden_failures = [c for c in result.cases if c.hidden and not c.passed]
    assert hidden_failures and all(c.passed for c in result.cases if not c.hidden)
    for c in hidden_failures:
        assert "expected" not in c.explanation and not re.search(r"\d{5,}", c.explanation), c.explanation
    assert "hidden" in out and "lab 2:" in out


def test_seed_from_argument_env_or_user(monkeypatch):
    monkeypatch.setenv(check_module.SEED_ENV, "1234")
    assert resolve_seed() == 1234 and resolve_seed(5) == 5
    monkeypatch.delenv(check_module.SEED_ENV)
    assert resolve_seed() == resolve_seed()


def test_check_reports_a_stub_without_raising_and_counts_progress(capsys):
    def stub(size, config):
        raise NotImplementedError("write your solution here")
    result = check("lab2.round_size", stub, seed=3)
    out = capsys.readouterr().out
    assert not result.passed and "not written yet" in result.explanation and result.untouched
    assert re.search(r"lab 2: \d/\d exercises passing", out)
    assert not check("lab2.round_size", None, verbose=False).passed


def test_lab6_runs_one_receiver_process_per_check_and_stops_it(tmp_path):
    # check() runs the cases in a forked child (deadline.py): the receiver is started there, so each
    # start is written to a file, and whether it still runs is asked of the system.
    lab6 = importlib.import_module("allocator_ref.labs.lab6")
    started = tmp_path / "started"
    real = lab6.LabPeer.__init__

    def counting(self):
        real(self)
        with open(started, "a") as f:
            f.write(f"{self.process.pid}\n")
    lab6.LabPeer.__init__ = counting
    try:
        result = check("lab6.lifetime", _load(ROOT / "labs" / "wrong" / "lab6_never_frees.py").SUBMISSION,
                       seed=1, verbose=False)
    finally:
        lab6.LabPeer.__init__ = real
    assert not result.passed and len(result.cases) > 1
    pids = started.read_text().split()
    assert len(pids) == 1, "every case of one check shares one receiver process"
    try:
        os.kill(int(pids[0]), 0)                  # signal 0: only asks whether the process exists
        alive = True
    except ProcessLookupError:
        alive = False
    assert lab6._PEER is None and not alive, "the receiver process outlived its check"


# ------------------------------------------------------------------ notebooks
def _kernel_env() -> dict:
    env = dict(os.environ)
    env.update(ALLOCATOR_REF_DEVICE="sim", MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1",
               ALLOCATOR_REF_LAB_SEED="11")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _execute(nb, path: Path, stderr=None):
    """Run every cell in a kernel of its own, under the labs' environment (given to the kernel, so
    that two runs at once in two threads need not change this process's os.environ)."""
    from nbclient import NotebookClient
    start = time.perf_counter()
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute(
        env=_kernel_env(), **({} if stderr is None else {"stderr": stderr}))
    TIMINGS[path.name] = time.perf_counter() - start
    return nb


def _execute_ahead(nb, path: Path):
    """``_execute`` in the background: the kernel's own stderr goes to a file, not to pytest's terminal
    between two tests' captures, and is added to the error when the run fails (as test_notebooks does)."""
    import tempfile
    with tempfile.TemporaryFile("w+") as kernel_stderr:
        try:
            return _execute(nb, path, stderr=kernel_stderr)
        except Exception as exc:
            kernel_stderr.seek(0)
            exc.add_note("the kernel's stderr:\n" + kernel_stderr.read()[-3000:])
            raise


# ------------------------------------------------------------------ lab notebooks run ahead, a few at once
# As tests/test_notebooks.py runs the chapters: a kernel is one busy process while pytest waits on it, so
# the 18 lab notebooks (each lab's instructor and student copy) ran one after another with a core idle.
# The first notebook test starts every run the selected notebook tests will ask for, as many at once as
# there are cores; each test takes its own run's result (its error, if any, raised there); the module
# waits for all of them before it ends, so no kernel outlives it.
def _instructor(source: Path):
    return generate.read_source(source), source               # the .md: what `make student` reads


def _student(source: Path):
    path = generate.STUDENT_DIR / (source.stem + ".ipynb")
    return nbformat.read(path, as_version=4), path


NOTEBOOK_RUNS = {"test_instructor_notebook_executes_and_every_check_passes": _instructor,
                 "test_student_notebook_executes_and_every_exercise_fails": _student}


@pytest.fixture(scope="module")
def executed(request):
    """(test name, lab source) -> the executed notebook, run ahead when there are two cores for it."""
    from concurrent.futures import ThreadPoolExecutor
    planned = [(item.originalname, item.callspec.params["source"]) for item in request.session.items
               if item.module is request.module and getattr(item, "originalname", None) in NOTEBOOK_RUNS]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if len(planned) < 2 or cores < 2:
        yield lambda name, source: _execute(*NOTEBOOK_RUNS[name](source))
        return
    with ThreadPoolExecutor(max_workers=cores) as pool:
        runs = {key: pool.submit(lambda key=key: _execute_ahead(*NOTEBOOK_RUNS[key[0]](key[1]))) for key in planned}
        try:
            yield lambda name, source: runs[(name, source)].result()
        finally:                      # what no test asked for (one failed first) is still waited for
            for run in runs.values():
                run.exception()


def _check_outputs(nb) -> dict:
    """{exercise id: printed text} of every check(...) cell."""
    result = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        ids = CHECK_CALL.findall(cell.source)
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        for ex in ids:
            result[ex] = text
    return result


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_instructor_notebook_executes_and_every_check_passes(source, executed):
    nb = executed("test_instructor_notebook_executes_and_every_check_passes", source)
    outputs = _check_outputs(nb)
    assert outputs, "no check() cell ran"
    for ex, text in outputs.items():
        assert re.search(r"All \d+ cases pass", text), f"{ex} did not pass in the instructor notebook:\n{text}"


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_student_notebook_executes_and_every_exercise_fails(source, executed):
    nb = executed("test_student_notebook_executes_and_every_exercise_fails", source)   # raises if any cell errors
    outputs = _check_outputs(nb)
    exercises = {e for e in _all_exercises() if e.split(".")[0] == f"lab{int(source.stem[3:5])}"}
    assert exercises <= set(outputs), f"exercises without a check cell: {exercises - set(outputs)}"
    for ex in exercises:
        assert "FAIL" in outputs[ex] and "not written yet" in outputs[ex], f"{ex} did not fail:\n{outputs[ex]}"


def test_make_student_writes_the_pair_from_the_md_and_never_overwrites_a_later_notebook_edit(tmp_path, monkeypatch,
                                                                                          capsys):
    src, student = tmp_path / "labs" / "source", tmp_path / "labs" / "student"
    src.mkdir(parents=True)
    md = src / SOURCES[0].name
    md.write_text(SOURCES[0].read_text())
    for name, value in (("ROOT", tmp_path), ("SOURCE_DIR", src), ("STUDENT_DIR", student),
                        ("SOLUTIONS", tmp_path / "labs" / "solutions.json")):
        monkeypatch.setattr(generate, name, value)
    assert generate.main([]) == 0 and generate.pair_in_sync(md)        # no .ipynb yet: written from the .md
    assert generate.main(["--check"]) == 0

    md.write_text(md.read_text().replace("```{code-cell} ipython3\n", "```{code-cell} ipython3\n# edited in the .md\n", 1))
    assert generate.main(["--check"]) == 1                               # the pair is stale: CI says so
    assert generate.main([]) == 0 and "# edited in the .md" in md.with_suffix(".ipynb").read_text()

    ipynb = md.with_suffix(".ipynb")
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[0].source += "\nedited in the notebook"
    nbformat.write(nb, ipynb)
    later = md.stat().st_mtime + 60
    os.utime(ipynb, (later, later))
    capsys.readouterr()
    assert generate.main([]) == 1
    assert "was edited after" in capsys.readouterr().out
    assert "edited in the notebook" in ipynb.read_text(), "the notebook's edit was overwritten"


# ------------------------------------------------------------------ make check-labs: edges, solutions, guide
def test_every_seed_meets_every_edge_of_every_exercise():
    problems = verify.coverage_problems()
    assert not problems, "\n".join(problems)


def test_an_edge_no_seed_meets_is_reported(monkeypatch):
    from allocator_ref.labs import spec
    monkeypatch.setitem(spec.EDGES, "lab2.round_size",
                        spec.EDGES["lab2.round_size"] + (spec.Edge("a size of exactly 7 bytes", lambda d: False),))
    problems = verify.coverage_problems(2)
    assert any("never meet 'a size of exactly 7 bytes'" in p for p in problems), problems


def test_a_solution_that_returns_a_constant_is_reported(tmp_path, monkeypatch):
    """Rule 7: check-labs runs the solution itself; a wrong one (returning 12345) is a problem."""
    source = next(s for s in generate.sources() if s.name.startswith("lab02"))
    text = source.read_text().replace("### BEGIN SOLUTION\n", "### BEGIN SOLUTION\n    return 12345\n", 1)
    fake = tmp_path / source.name
    fake.write_text(text)
    monkeypatch.setattr(generate, "sources", lambda: [fake])
    problems = verify.solution_problems(2, seeds=(1,))
    assert any("lab2.round_size: the solution" in p and "fails a full check" in p for p in problems), problems
    assert not any(p.startswith("lab2.should_split") for p in problems), problems


def test_the_guide_table_row_of_each_exercise_is_checked(monkeypatch):
    real = (generate.ROOT / "labs" / "README.md").read_text()
    assert verify.guide_problems() == []
    moved = real.replace("`lab3.event`", "").replace("`lab1.explain`", "`lab1.explain`, `lab3.event`")
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: moved if self.name == "README.md" else real)
    assert any("`lab3.event` is in the row of lab 1" in p for p in verify.guide_problems())
