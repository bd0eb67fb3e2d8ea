"""The numbers a chapter states in its prose are the numbers its code produces.

A chapter states a key number in its text in bold, ``reserved stays at **20.00 MiB**``, and the
markdown cell's metadata names it: ``"claims": {"q4_reserved": "20.00 MiB"}`` (in the MyST .md, the
``+++ {"claims": ...}`` line above the cell).  The code that computes it,
``course.claim("q4_reserved", course.fmt(al.memory_reserved()))``, is a section of
``tests/claims/<chapter>.py`` that runs in the kernel right after the code cell naming it
(``"claim_checks": "q4_reserved"``; tests/claim_checks.py), so a learner meets neither a marker in
the text they edit nor a hidden cell.  The value travels in the output's data
(mimetype ``application/vnd.allocator-ref.claim+json``).  Here every chapter is executed once
(shared with ``test_notebooks.py``), and for each claim in the prose the executed value must equal
the stated text exactly.  So the text cannot drift from the code: change a default, a profile or an
allocator rule and the chapter whose prose relied on it fails here.

A claim may be words as well as a number: ``**every rung failed**`` claimed as ``q4_ladder``,
computed by ``claim("q4_ladder", result_words(all_failed, "every rung failed", ...))``.  The Chinese
edition states the catalogue's Chinese of such words (``course.result_words`` says them in the
Chinese run), and its cells carry the same metadata with the Chinese value (``editions build``).

Rules checked:
* every claimed value stands in bold, ``**value**``, in the text of the cell whose metadata claims it;
* every claim in the prose is computed by the notebook, with the same value, under both
  profiles, and (for a chapter that reads a real PyTorch snapshot) also without the real traces
  (tests/test_edition_zh.py makes the same checks of the Chinese edition);
* a name is claimed once in the prose (one number, one place to fix);
* every section of a claims file is named by exactly one code cell, and defines nothing the chapter's
  later cells use (a learner's notebook runs without it);
* a sentence that reads a cell's output (the first paragraph after a code cell, or one that says
  "above", "below", "shows", "printed", "the table") and states a result with the words that carry
  one ("failed", "succeeded", "identical", "fits", "already set", "every ... failed") carries a claim:
  the words are then produced by the cell, not written beside it;
* a claim prints nothing a learner sees (no ``claim name = value`` line in the output or on the site).
"""
from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import jupytext
import nbformat
import pytest

from claim_checks import claims_file, named_sections, sections, stated
from test_notebooks import (NOTEBOOKS, PROFILE_PARAMS, PROFILES, REAL_TRACE_CHAPTERS, _ids, execute_notebook,
                            outputs_text, run_ahead)

CLAIM_MIME = "application/vnd.allocator-ref.claim+json"
OLD_MARKER = re.compile(r"<!--\s*claim:")


@pytest.fixture(scope="module", autouse=True)
def _chapters_ahead(request):
    """The chapter runs this module's tests ask for, started a few at once (test_notebooks.run_ahead)."""
    yield from run_ahead(request, {
        "test_prose_numbers_match_the_code": lambda p: (p["path"], p["profile"], None, ()),
        "test_prose_matches_the_code_without_the_real_traces": lambda p: (p["path"], PROFILES[0], None,
                                                                          NO_REAL_TRACES),
        "test_claims_print_nothing_a_learner_sees": lambda p: (p["path"], PROFILES[0], None, ())})


def computed_claims(nb) -> dict:
    """name -> value computed by the notebook; None for a claim the run could not check
    (``_course.claim_needs_real_trace``: a statement about a real PyTorch snapshot, none found)."""
    values: dict = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if CLAIM_MIME in data:
                item = data[CLAIM_MIME]
                values[item["name"]] = item["value"]
    return values


def _md(source, claims=None):
    return nbformat.v4.new_markdown_cell(source, metadata={"claims": claims} if claims else {})


def test_the_reader_finds_each_claimed_bold_value():
    nb = nbformat.v4.new_notebook(cells=[_md("held **500.00 MiB** and **3**.", {"a": "500.00 MiB", "b": "3"})])
    assert stated(nb) == {"a": "500.00 MiB", "b": "3"}
    with pytest.raises(AssertionError, match="has no \\*\\*3\\*\\*"):
        stated(nbformat.v4.new_notebook(cells=[_md("plain 3", {"c": "3"})]))
    with pytest.raises(AssertionError, match="twice"):
        stated(nbformat.v4.new_notebook(cells=[_md("**1**", {"d": "1"}), _md("**1**", {"d": "1"})]))


def _prose(path: Path):
    """The notebook whose prose a run is checked against: the English .md (its source of truth)."""
    return jupytext.read(path.with_suffix(".md"))


def _has_claims(path: Path) -> bool:
    return any(c.cell_type == "markdown" and c.metadata.get("claims") for c in _prose(path).cells)


WITH_CLAIMS = [p for p in NOTEBOOKS if p.with_suffix(".md").exists() and _has_claims(p)]


def _compare(path: Path, run, where: str) -> None:
    prose = stated(_prose(path))
    computed = computed_claims(run)
    missing = sorted(set(prose) - set(computed))
    assert not missing, (f"{where}: the prose states {missing} but no claim check computes them "
                         f"(a section of {claims_file(path).name} run after the cell naming it)")
    unchecked = sorted(k for k in prose if computed[k] is None)
    if unchecked:
        warnings.warn(f"{where}: claims {unchecked} need the real PyTorch snapshots and were not "
                      f"checked (python -m allocator_ref traces fetch, or ../shared/traces)")
    wrong = {k: (prose[k], computed[k]) for k in prose if computed[k] is not None and prose[k] != computed[k]}
    assert not wrong, (f"{where}: the prose and the code disagree (name: (prose, code)): {wrong}. "
                       f"Fix the text (the bold value and its cell's claims metadata), or find out why the "
                       f"code changed.")


@pytest.mark.skipif(not WITH_CLAIMS, reason="no chapter states claims yet")
@pytest.mark.parametrize("profile", PROFILE_PARAMS)
@pytest.mark.parametrize("path", WITH_CLAIMS, ids=_ids(WITH_CLAIMS))
def test_prose_numbers_match_the_code(path: Path, profile: str):
    """Under the suite's profile and a workshop's: a number the prose states holds on both
    (a cell that talks about one GPU's numbers pins that profile and says so)."""
    run, _ = execute_notebook(path, profile)
    _compare(path, run, f"{path.name} under profile {profile}")


NO_REAL_TRACES = (("ALLOCATOR_REF_TRACES", "none"),)
REAL_TRACE_WITH_CLAIMS = [p for p in REAL_TRACE_CHAPTERS if p in WITH_CLAIMS]


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL_TRACE_WITH_CLAIMS, ids=_ids(REAL_TRACE_WITH_CLAIMS))
def test_prose_matches_the_code_without_the_real_traces(path: Path):
    """A clone without ../shared/traces: every claim either holds on the course-made trace or is one
    the cell declares unchecked (a statement about PyTorch's own snapshot); none is silently wrong."""
    run, _ = execute_notebook(path, extra_env=NO_REAL_TRACES)
    _compare(path, run, f"{path.name} without the real traces")


# ------------------------------------------------------------------ the checks live outside the notebook

MARKDOWN_CHAPTERS = sorted(p.with_suffix(".md") for p in NOTEBOOKS if p.with_suffix(".md").exists())


ROOT = Path(__file__).resolve().parents[1]
# What a learner opens (and the site renders): the English sources and notebooks, the Chinese builds, the labs.
OPENED = MARKDOWN_CHAPTERS + sorted((ROOT / "chapters" / "zh").glob("[0-9][0-9]_*.ipynb")) + sorted(
    p for folder in ("labs/source", "labs/student", "labs/source/zh", "labs/student/zh")
    for p in (ROOT / folder).glob("lab[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("md", OPENED, ids=[p.relative_to(ROOT).as_posix() for p in OPENED])
def test_a_learner_meets_no_claim_machinery(md: Path):
    """No marker in the text a learner edits, no cell (hidden or not) that records a claim."""
    nb = jupytext.read(md) if md.suffix == ".md" else nbformat.read(md, as_version=4)
    markers = [c.source[:60] for c in nb.cells if c.cell_type == "markdown" and OLD_MARKER.search(c.source)]
    cells = [c.source[:60] for c in nb.cells if c.cell_type == "code" and re.search(r"\bcourse\.claim", c.source)]
    assert not markers, f"{md.name}: claim markers in markdown (put the name in the cell's claims metadata): {markers}"
    assert not cells, f"{md.name}: cells that record claims (move them to {claims_file(md).name}): {cells}"


def _names(source: str, context) -> set:
    """The names a piece of code stores (``ast.Store``) or reads (``ast.Load``)."""
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, context)}


@pytest.mark.parametrize("md", MARKDOWN_CHAPTERS, ids=[p.name for p in MARKDOWN_CHAPTERS])
def test_every_claims_section_is_named_once_and_defines_nothing_the_chapter_uses(md: Path):
    nb = jupytext.read(md)
    code, named = sections(claims_file(md)), named_sections(nb)
    assert sorted(named) == sorted(set(named)), f"{md.name}: a claims section is named by two cells: {named}"
    assert set(named) <= set(code), f"{md.name}: cells name sections {sorted(set(named) - set(code))} not in {claims_file(md).name}"
    assert set(code) <= set(named), f"{claims_file(md).name}: sections {sorted(set(code) - set(named))} no cell names"
    chapter_code = [c.source for c in nb.cells if c.cell_type == "code"]
    made_by_chapter = set().union(*(_names(s, ast.Store) for s in chapter_code))
    used_later = []
    for k, cell in enumerate(nb.cells):
        name = cell.metadata.get("claim_checks") if cell.cell_type == "code" else None
        if not name:
            continue
        only_here = _names(code[name], ast.Store) - made_by_chapter
        later = set().union(*(_names(c.source, ast.Load) for c in nb.cells[k + 1:] if c.cell_type == "code"))
        used_later += [(name, v) for v in sorted(only_here & later)]
    assert not used_later, (f"{md.name}: later cells use names only a claims section defines (a learner's "
                            f"notebook runs without it): {used_later}")


# ------------------------------------------------------------------ claims are invisible
SCAFFOLDING = re.compile(r"^claim [\w.\-]+( =|:)", re.M)


@pytest.mark.parametrize("path", WITH_CLAIMS, ids=_ids(WITH_CLAIMS))
def test_claims_print_nothing_a_learner_sees(path: Path):
    """What a learner (and the website) sees of an executed chapter holds no test line."""
    run, _ = execute_notebook(path)
    shown = SCAFFOLDING.findall(outputs_text(run))
    markdown = [out["data"]["text/markdown"] for cell in run.cells for out in cell.get("outputs", [])
                if CLAIM_MIME in out.get("data", {})]
    assert not shown, f"{path.name}: {len(shown)} claim line(s) appear in the output a learner reads"
    assert all(text == "" for text in markdown), f"{path.name}: a claim output renders visible text"


def test_a_claim_shows_nothing_and_carries_its_value():
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chapters"))
    import _course
    shown = []
    from IPython import display as ipy_display
    original = ipy_display.display
    ipy_display.display = lambda obj, raw=False: shown.append(obj)
    try:
        _course.claim("q_test", "every rung failed")
        _course.claim_needs_real_trace("q_real")
    finally:
        ipy_display.display = original
    assert shown[0][CLAIM_MIME] == {"name": "q_test", "value": "every rung failed"}
    assert shown[1][CLAIM_MIME]["value"] is None
    assert all(set(item) == {CLAIM_MIME, "text/markdown"} and item["text/markdown"] == "" for item in shown)


# ------------------------------------------------------------------ the words that carry a result
RESULT_WORDS = re.compile(r"\b(failed|fails|succeeded|succeeds|identical|fits|fit|already set|"
                          r"every \w+ (?:failed|fails|succeeded|passed|matched|fit|fits))\b", re.I)
READS_OUTPUT = re.compile(r"\b(above|below|printed|prints|shows|showed|this run|"
                          r"the (?:table|output|figure|picture|plot))\b", re.I)
def _sentences(markdown: str):
    """(paragraph number, sentence) of a markdown cell, code fences left out."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    for k, para in enumerate(re.split(r"\n\s*\n", text)):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z*`(])", " ".join(para.split())):
            yield k, sentence


def unclaimed_results(cells) -> list:
    """Sentences that read a cell's output and state a result in words, without a claimed bold value."""
    found, previous = [], None
    for cell in cells:
        if cell["cell_type"] == "markdown":
            claimed = [f"**{v}**" for v in cell.get("metadata", {}).get("claims", {}).values()]
            for k, sentence in _sentences(cell["source"]):
                reads = (k == 0 and previous == "code") or READS_OUTPUT.search(sentence)
                if reads and RESULT_WORDS.search(sentence) and not any(v in sentence for v in claimed):
                    found.append(sentence)
        previous = cell["cell_type"]
    return found


def test_the_result_words_reader_finds_an_unclaimed_result():
    cells = [{"cell_type": "code", "source": "x()"},
             {"cell_type": "markdown", "source": "Every rung failed: the segment is split."},
             {"cell_type": "markdown", "source": "A general rule: a block that fits is reused."},
             {"cell_type": "markdown", "source": "The table above shows that **every rung failed**.",
              "metadata": {"claims": {"q": "every rung failed"}}},
             {"cell_type": "markdown", "source": "The table above shows that **every rung failed**."}]
    assert unclaimed_results(cells) == ["Every rung failed: the segment is split.",
                                        "The table above shows that **every rung failed**."]


@pytest.mark.parametrize("md", MARKDOWN_CHAPTERS, ids=[p.name for p in MARKDOWN_CHAPTERS])
def test_a_sentence_that_states_a_result_carries_a_claim(md: Path):
    import jupytext
    found = unclaimed_results(jupytext.read(md).cells)
    assert not found, (f"{md.name}: these sentences state a result of a cell in words but carry no claim; "
                       f"make the cell produce the words (claim(name, course.result_words(...)) in "
                       f"{claims_file(md).name}), put them in bold and name them in the cell's claims metadata, "
                       f"or say it without a result word: {found}")
