"""The chapters run, top to bottom, on the simulated device; their files stay clean and paired.

What this file checks, for EVERY ``chapters/*.ipynb`` (chapters added later are
picked up without editing this file):

* it executes top to bottom exactly as a learner's Run All does: every cell,
  ``gpu``-tagged ones included (on a machine without a GPU they must say what
  they would measure and let the notebook go on), the device left at the
  course setting (``auto``: the simulated device when no GPU answers), under
  two simulated profiles (``PROFILES``), in a kernel that runs this virtual
  environment's interpreter; ``make gpu-check`` runs them on the real GPU
  (``test_notebook_on_gpu``);
* every student lab notebook (``labs/student``) runs the same way under the
  second profile (``tests/test_labs.py`` runs them under the first);
* the ``.ipynb`` carries no outputs and no execution counts;
* the ``.ipynb`` and its jupytext MyST twin ``.md`` have the same cells
  (type, source, tags and claims metadata), so editing one without ``make sync-notebooks`` fails;
* the chapter conventions every learner relies on: the first code cell opens
  the device, learning objectives at the top, a recap and "try it" at the end,
  a link to the chapter's lab; no "spec §" citations (a learner has no spec);
* a chapter that reads a real PyTorch snapshot, run without any
  (``ALLOCATOR_REF_TRACES=none``), says its trace is course-made and claims
  no agreement with PyTorch.

The whole course must execute in under 5 minutes on the 2-core CI machine.
That is a session-level figure: the time of each notebook and the total are
printed at the end of the run (not asserted by a timed unit test).

Chapter authors: write ``chapters/NN_name.md`` (MyST), then
``jupytext --to ipynb chapters/NN_name.md`` and
``jupytext --set-formats ipynb,md:myst chapters/NN_name.ipynb``; commit both
without outputs.  Tag a cell ``gpu`` (cell metadata ``tags: [gpu]``) when it
needs a real GPU, and open the GPU with ``course.real_gpu(what it measures, where
the simulated equivalent is)``, which returns None (after saying so) without one.
State a measured value in bold and name it in the markdown cell's ``claims`` metadata; compute it
in a section of ``tests/claims/NN_name.py`` that the computing cell names (``claim_checks``):
``tests/claim_checks.py`` and ``tests/test_chapter_claims.py`` say how.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
CELL_TIMEOUT_S = 180          # one cell; the slowest chapter cells take a few seconds
COURSE_BUDGET_S = 300         # the whole course, on the 2-core CI machine (printed, checked by hand)
KERNEL_NAME = "python3"       # ipykernel's native spec: jupyter_client runs it with sys.executable
GPU_TAG = "gpu"

NOTEBOOKS = sorted(p for p in CHAPTERS.glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
TIMINGS: dict[str, float] = {}          # notebook name -> seconds, for the session summary
_EXECUTED: dict[tuple, tuple] = {}      # (path, profile, device, mtime) -> (executed notebook, seconds)


def _ids(paths):
    return [p.name for p in paths]


def cell_tags(cell) -> list:
    return list(cell.get("metadata", {}).get("tags", []))


PROFILES = ("h100-80gb", "t4-16gb")    # the suite's pinned profile, and a workshop's smaller card
# As test parameters: the second profile doubles the chapters' run time, so `make test-fast` leaves it out.
PROFILE_PARAMS = [PROFILES[0], pytest.param(PROFILES[1], marks=pytest.mark.slow)]


def kernel_env(device: str | None = None, profile: str | None = None) -> dict:
    """The learner's environment: the course settings (pinned by conftest), plus what a run overrides.

    ``device=None`` leaves the course setting (``auto``) alone, as a learner's
    Run All does, except where a GPU answers: there the chapter numbers would be
    measured, so the run stays on the simulated device (``make gpu-check`` covers the GPU).
    """
    env = dict(os.environ)
    env.update(MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1")
    if device is None and _gpu_present():
        device = "sim"
    if device is not None:
        env["ALLOCATOR_REF_DEVICE"] = device
    if profile is not None:
        env["ALLOCATOR_REF_PROFILE"] = profile
    # The kernel must import the package from this checkout, wherever pytest was started.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def execute_notebook(path: Path, profile: str = PROFILES[0], device: str | None = None,
                     extra_env: tuple = ()):
    """Run a notebook once per session and profile (cached), every cell; returns (executed, seconds).

    ``tests/test_chapter_claims.py`` reads the executed outputs from here, so
    each chapter runs only once per pytest session and profile; the chapter's claim
    checks (``tests/claims/<chapter>.py``) run in the kernel after the cells that name them.
    A run started ahead (``run_ahead``) is waited for here; its error, if any, is raised here as it would be.
    """
    key = _key(path, profile, device, extra_env)
    if key in _EXECUTED:
        return _EXECUTED[key]
    ahead = _AHEAD.pop(key, None)
    _EXECUTED[key] = ahead.result() if ahead is not None else _execute(path, profile, device, extra_env)
    return _EXECUTED[key]


def _key(path: Path, profile: str, device, extra_env: tuple) -> tuple:
    return (str(path), profile, device, extra_env, path.stat().st_mtime_ns)


def _execute(path: Path, profile: str, device, extra_env: tuple, stderr=None):
    from nbclient import NotebookClient
    from claim_checks import with_checks
    run = with_checks(nbformat.read(path, as_version=4), path)     # each claim section after its cell
    client = NotebookClient(run, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL_NAME, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    # stderr: the kernel process's own (its start-up warnings), passed to jupyter_client's start_kernel
    client.execute(env={**kernel_env(device, profile), **dict(extra_env)},
                   **({} if stderr is None else {"stderr": stderr}))
    return run, time.perf_counter() - start


def _execute_ahead(path: Path, profile: str, device, extra_env: tuple):
    """``_execute`` in the background: the kernel's own stderr goes to a file, not to pytest's
    terminal between two tests' captures, and is added to the error when the run fails."""
    import tempfile
    with tempfile.TemporaryFile("w+") as kernel_stderr:
        try:
            return _execute(path, profile, device, extra_env, stderr=kernel_stderr)
        except Exception as exc:
            kernel_stderr.seek(0)
            exc.add_note("the kernel's stderr:\n" + kernel_stderr.read()[-3000:])
            raise


# ------------------------------------------------------------------ notebooks run ahead, a few at once
# A notebook's kernel is one busy process while pytest waits on it: run alone, the chapters and labs
# leave every core but one idle.  A module that executes notebooks starts the runs its selected tests will ask for
# (in their order) on as many kernels as there are cores, and waits for them all before it ends, so no
# kernel outlives it (a later module's autograder kills processes under its caller).  Each run is its
# own kernel with its own environment, as tools/build_site.py runs two chapters at once for the site;
# the seconds printed per chapter are then measured beside another kernel.
_AHEAD: dict = {}                   # key -> Future of (executed notebook, seconds)


def run_ahead(request, planned: dict):
    """Start, for every selected test of this module named in ``planned`` (test name -> its
    parameters -> execute_notebook's arguments), the notebook run it will ask for; yield; wait for all."""
    from concurrent.futures import ThreadPoolExecutor
    runs = []
    for item in request.session.items:
        plan = planned.get(getattr(item, "originalname", None))
        if item.module is request.module and plan is not None and hasattr(item, "callspec"):
            args = plan(item.callspec.params)
            if _key(*args) not in _EXECUTED and _key(*args) not in _AHEAD and args not in runs:
                runs.append(args)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if len(runs) < 2 or cores < 2:
        yield
        return
    with ThreadPoolExecutor(max_workers=cores) as pool:
        for args in runs:
            _AHEAD[_key(*args)] = pool.submit(_execute_ahead, *args)
        try:
            yield
        finally:                      # what no test asked for (one failed first) is still waited for
            for args in runs:
                ahead = _AHEAD.pop(_key(*args), None)
                if ahead is not None:
                    ahead.exception()


@pytest.fixture(scope="module", autouse=True)
def _chapters_ahead(request):
    yield from run_ahead(request, {
        "test_notebook_runs_all_without_a_gpu": lambda p: (p["path"], p["profile"], None, ()),
        "test_without_real_traces_a_chapter_says_so": lambda p: (p["path"], PROFILES[0], None, NO_TRACES),
        "test_student_lab_runs_all_under_the_second_profile": lambda p: (p["path"], PROFILES[1], None, ())})


NO_TRACES = (("ALLOCATOR_REF_TRACES", "none"),)


def outputs_text(nb) -> str:
    """Every text the executed notebook printed or displayed (for error messages and claims)."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append(out["text"])
            data = out.get("data", {})
            if "text/plain" in data:
                parts.append(data["text/plain"])
    return "\n".join(parts)


# ------------------------------------------------------------------ session summary

@pytest.fixture(scope="module", autouse=True)
def _print_course_time(request):
    """Print each notebook's execution time and the course total at the end (the 5-minute figure)."""
    yield
    if not TIMINGS:
        return
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    total = sum(TIMINGS.values())
    verdict = "within" if total <= COURSE_BUDGET_S else "OVER"
    lines = ["", f"course execution on the simulated device ({os.cpu_count()} CPU cores), per notebook:"]
    lines += [f"  {name:<40} {seconds:6.1f} s" for name, seconds in sorted(TIMINGS.items())]
    lines.append(f"  {'total':<40} {total:6.1f} s   ({verdict} the {COURSE_BUDGET_S} s budget)")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        for line in lines:
            reporter.write_line(line) if reporter else print(line)


# ------------------------------------------------------------------ the kernel

def test_kernel_runs_this_interpreter(tmp_path):
    """The chapters' kernel is this environment's Python (not a system one without the package)."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)      # always there while ipykernel imports
    assert spec.language == "python"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import sys, os, allocator_ref\n"
        "print(sys.executable)\nprint(os.environ['ALLOCATOR_REF_DEVICE'])\nprint(allocator_ref.__file__)")]
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    run, _ = execute_notebook(path, device="sim")
    executable, device, package = run.cells[0].outputs[0]["text"].split()
    assert Path(executable).resolve() == Path(sys.executable).resolve(), (
        f"the notebook kernel runs {executable}, the tests run {sys.executable}")
    assert device == "sim"
    assert Path(package).resolve().is_relative_to(ROOT), package


# ------------------------------------------------------------------ execution

@pytest.mark.skipif(not NOTEBOOKS, reason="no chapters yet")
@pytest.mark.parametrize("profile", PROFILE_PARAMS)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_all_without_a_gpu(path, profile):
    """A learner's Run All, gpu cells included, on the simulated device under each profile."""
    try:
        run, seconds = execute_notebook(path, profile)
    except Exception as exc:      # CellExecutionError carries the failing cell and traceback
        pytest.fail(f"{path.name} failed under profile {profile}:\n{exc}", pytrace=False)
    if profile == PROFILES[0]:
        TIMINGS[path.name] = seconds
    text = outputs_text(run)
    assert "simulated" in text.lower(), f"{path.name} never says that its figures are simulated"
    for cell in run.cells:
        if cell.cell_type == "code" and GPU_TAG in cell_tags(cell) and not _gpu_present():
            said = "".join(o.get("text", "") for o in cell.get("outputs", []))
            assert re.search(r"no GPU", said) and re.search(r"simulated", said), (
                f"{path.name}: a gpu cell on a machine without a GPU must say what it would measure "
                f"and where the simulated equivalent is; it printed:\n{said[:600]}")


REAL_TRACE_CHAPTERS = [p for p in NOTEBOOKS if "find_trace(" in p.with_suffix(".md").read_text(encoding="utf-8")]


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL_TRACE_CHAPTERS, ids=_ids(REAL_TRACE_CHAPTERS))
def test_without_real_traces_a_chapter_says_so(path):
    """A clone without the real snapshots: the chapter runs, says its trace is course-made, and
    never reports agreement with PyTorch for it (ALLOCATOR_REF_TRACES=none hides every real one)."""
    run, _ = execute_notebook(path, extra_env=NO_TRACES)
    text = outputs_text(run)
    assert "COURSE-MADE" in text and "traces fetch" in text, f"{path.name} does not say its trace is course-made"
    assert not re.search(r"at PyTorch's (?:exact )?address|\(real PyTorch snapshot\)", text), (
        f"{path.name} claims agreement with PyTorch for a course-made trace")


STUDENT_LABS = sorted((ROOT / "labs" / "student").glob("lab*.ipynb"))


@pytest.mark.slow
@pytest.mark.skipif(not STUDENT_LABS, reason="no student lab notebooks generated")
@pytest.mark.parametrize("path", STUDENT_LABS, ids=_ids(STUDENT_LABS))
def test_student_lab_runs_all_under_the_second_profile(path):
    """A learner's untouched lab under a workshop's profile: every cell runs (the checks say FAIL, not crash)."""
    try:
        execute_notebook(path, PROFILES[1])
    except Exception as exc:
        pytest.fail(f"{path.name} failed under profile {PROFILES[1]}:\n{exc}", pytrace=False)


def _gpu_present() -> bool:
    if os.environ.get("ALLOCATOR_REF_DEVICE", "") == "sim":
        return False
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


GPU_NOTEBOOKS = [p for p in NOTEBOOKS
                 if any(GPU_TAG in cell_tags(c) for c in nbformat.read(p, as_version=4).cells)]


@pytest.mark.gpu
@pytest.mark.skipif(not GPU_NOTEBOOKS, reason="no chapter has cells tagged 'gpu'")
@pytest.mark.parametrize("path", GPU_NOTEBOOKS, ids=_ids(GPU_NOTEBOOKS))
def test_notebook_on_gpu(path):
    """``make gpu-check``: the whole chapter, ``gpu`` cells included, on the real device."""
    if not _gpu_present():
        pytest.skip("no NVIDIA GPU answers nvidia-smi here")
    execute_notebook(path, device="cuda")


# ------------------------------------------------------------------ clean files

@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_ipynb_has_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, (f"{path.name}: cells {dirty} carry outputs or execution counts; strip them "
                       f"(jupyter nbconvert --clear-output --inplace, or jupytext --to ipynb from the .md)")


def _cells(nb) -> list:
    """What a pair must agree on: type, source, tags, and the claims metadata (the bold values a
    markdown cell states, the claim checks a code cell names: tests/claim_checks.py)."""
    return [(c.cell_type, c.source.strip(), sorted(cell_tags(c)), c.metadata.get("claims"),
             c.metadata.get("claim_checks")) for c in nb.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_ipynb_and_md_in_sync(path):
    import jupytext

    md = path.with_suffix(".md")
    assert md.exists(), f"{path.name} has no MyST twin {md.name} (jupytext --set-formats ipynb,md:myst)"
    from_ipynb = jupytext.read(path)
    from_md = jupytext.read(md)
    formats = from_ipynb.metadata.get("jupytext", {}).get("formats", "")
    assert "md:myst" in formats, f"{path.name} is not paired with md:myst (metadata jupytext.formats={formats!r})"
    a, b = _cells(from_ipynb), _cells(from_md)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, (f"{path.name} and {md.name} differ at cell {i}:\n  ipynb: {x!r:.300}\n  md:    {y!r:.300}\n"
                        f"run `make sync-notebooks` (jupytext --sync)")
    assert len(a) == len(b), f"{path.name} has {len(a)} cells, {md.name} has {len(b)}: run `make sync-notebooks`"


# ------------------------------------------------------------------ chapter conventions

@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_chapter_conventions(path):
    nb = nbformat.read(path, as_version=4)
    # the Colab bootstrap (tag "colab", tools/colab_cells.py) comes before the chapter proper
    code = [c for c in nb.cells if c.cell_type == "code" and "colab" not in cell_tags(c)]
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert code and "open_device" in code[0].source, (
        f"{path.name}: the first code cell must open the device and print what it is")
    head = "\n".join(c.source for c in nb.cells[:3] if c.cell_type == "markdown")
    assert re.search(r"learning objectives", head, re.I), f"{path.name}: learning objectives at the top"
    assert re.search(r"^#+ .*recap", markdown, re.I | re.M), f"{path.name}: a recap section at the end"
    assert re.search(r"^#+ .*try it", markdown, re.I | re.M), f"{path.name}: a 'try it' section at the end"
    cited = re.findall(r"spec\s*§\s*[\d.–-]+", markdown)
    assert not cited, (f"{path.name} cites {cited}: a learner has no spec; cite the PyTorch function "
                       f"(file + name) or the course's own files")
    number = path.name[:2]
    wanted = r"\d\d" if number == "00" else number        # chapter 0 (setup) points at the first lab
    assert re.search(rf"labs/student/lab{wanted}_\w+\.ipynb", markdown), (
        f"{path.name}: link the chapter's lab as labs/student/lab{number}_<name>.ipynb")


def test_the_tour_names_every_chapter():
    """Chapter 0's tour has one row per chapter file: a chapter added later is not left out of it."""
    tour = (CHAPTERS / "00_setup_and_tour.md").read_text(encoding="utf-8")
    rows = set(int(n) for n in re.findall(r"^\| (\d+) ", tour, re.M))
    chapters = {int(p.name[:2]) for p in NOTEBOOKS if p.name[:2] != "00"}
    assert rows == chapters, f"chapter 0's tour: add rows for {sorted(chapters - rows)}, remove {sorted(rows - chapters)}"


# ------------------------------------------------------------------ reading
SOURCE_REF = re.compile(r"\[[^\]]*#\d+\]\(https://github\.com/[^)]+\)|\b[\w.-]+/[\w.-]+#\d+\b")
WALL_WORDS = 110           # a paragraph longer than this is a wall: break it where the idea changes


def reading_problems(markdown_cells) -> dict:
    """{"sources": [...], "walls": [...]}: issue/PR references inline in the prose (they belong in the
    section's **Sources** list) and paragraphs of more than WALL_WORDS words (lists and tables aside)."""
    found = {"sources": [], "walls": []}
    for source in markdown_cells:
        in_sources = False
        for para in re.split(r"\n\s*\n", re.sub(r"```.*?```", "", source, flags=re.S)):
            text = para.strip()
            if text.startswith("**Sources"):
                in_sources = True
                continue
            if text.startswith("#"):
                in_sources = False
            if not in_sources and SOURCE_REF.search(text):
                found["sources"].append(text[:120])
            if len(text.split()) > WALL_WORDS and not text.startswith(("|", "-", "*", "1.")):
                found["walls"].append(text[:120])
    return found


def test_reading_problems_are_found():
    cells = ["A claim ([pytorch/pytorch#1](https://github.com/pytorch/pytorch/pull/1)).",
             "**Sources**\n\n- [pytorch/pytorch#1](https://github.com/pytorch/pytorch/pull/1): fine here.",
             " ".join(["word"] * (WALL_WORDS + 1))]
    found = reading_problems(cells)
    assert len(found["sources"]) == 1 and found["sources"][0].startswith("A claim")
    assert len(found["walls"]) == 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_sources_are_listed_and_paragraphs_are_short(path):
    """Issue and PR numbers go in a short **Sources** list per section, not inline; no wall of text."""
    import jupytext
    md = path.with_suffix(".md")
    cells = [c.source for c in jupytext.read(md).cells if c.cell_type == "markdown"]
    found = reading_problems(cells)
    problems = {k: v for k, v in found.items() if v}
    assert not problems, (f"{md.name}: move issue/PR references into the section's **Sources** list and break "
                          f"paragraphs over {WALL_WORDS} words: {problems}")
