"""The numbers a chapter states in its prose are the numbers its code produces.

A chapter states a key number in its text as

    reserved stays at **20.00 MiB**<!-- claim: q4_reserved -->

and computes it in a code cell with ``_course.claim("q4_reserved", value)``,
which displays the value (mimetype ``application/vnd.allocator-ref.claim+json``).
Here every chapter is executed once (shared with ``test_notebooks.py``), and
for each claim in the prose the executed value must equal the stated text
exactly.  So the text cannot drift from the code: change a default, a profile
or an allocator rule and the chapter whose prose relied on it fails here.

A claim may be words as well as a number: ``**every rung failed**<!-- claim: q4_ladder -->``,
computed by ``claim("q4_ladder", result_words(all_failed, "every rung failed", ...))``.

Rules checked:
* every ``<!-- claim: name -->`` marker directly follows a bold ``**value**``;
* every claim in the prose is computed by the notebook, with the same value, under both
  profiles, and (for a chapter that reads a real PyTorch snapshot) also without the real traces;
* a name is claimed once in the prose (one number, one place to fix);
* a sentence that reads a cell's output (the first paragraph after a code cell, or one that says
  "above", "below", "shows", "printed", "the table") and states a result with the words that carry
  one ("failed", "succeeded", "identical", "fits", "already set", "every ... failed") carries a claim:
  the words are then produced by the cell, not written beside it;
* a claim prints nothing a learner sees (no ``claim name = value`` line in the output or on the site).
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from test_notebooks import (NOTEBOOKS, PROFILE_PARAMS, PROFILES, REAL_TRACE_CHAPTERS, _ids, execute_notebook,
                            outputs_text, run_ahead)

CLAIM_MIME = "application/vnd.allocator-ref.claim+json"


@pytest.fixture(scope="module", autouse=True)
def _chapters_ahead(request):
    """The chapter runs this module's tests ask for, started a few at once (test_notebooks.run_ahead)."""
    yield from run_ahead(request, {
        "test_prose_numbers_match_the_code": lambda p: (p["path"], p["profile"], None, ()),
        "test_prose_matches_the_code_without_the_real_traces": lambda p: (p["path"], PROFILES[0], None,
                                                                          NO_REAL_TRACES),
        "test_claims_print_nothing_a_learner_sees": lambda p: (p["path"], PROFILES[0], None, ())})

MARKER = re.compile(r"<!--\s*claim:\s*([\w.\-]+)\s*-->")
BOLD_BEFORE = re.compile(r"\*\*([^*\n]+)\*\*$")


def prose_claims(markdown: str) -> dict:
    """name -> the value the prose states (the bold text right before the marker)."""
    claims: dict = {}
    for m in MARKER.finditer(markdown):
        before = markdown[:m.start()]
        bold = BOLD_BEFORE.search(before)
        name = m.group(1)
        if bold is None:
            raise AssertionError(f"claim {name!r}: the marker must follow a bold value, e.g. "
                                 f"**20.00 MiB**<!-- claim: {name} -->; found ...{before[-60:]!r}")
        if name in claims:
            raise AssertionError(f"claim {name!r} is stated twice in the prose")
        claims[name] = bold.group(1).strip()
    return claims


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


def test_parser_reads_bold_values():
    text = "held **500.00 MiB**<!-- claim: a --> and **3**<!--claim:b-->."
    assert prose_claims(text) == {"a": "500.00 MiB", "b": "3"}
    with pytest.raises(AssertionError, match="must follow a bold value"):
        prose_claims("plain 3 <!-- claim: c -->")
    with pytest.raises(AssertionError, match="twice"):
        prose_claims("**1**<!-- claim: d --> **1**<!-- claim: d -->")


WITH_CLAIMS = [p for p in NOTEBOOKS if p.with_suffix(".md").exists()
               and MARKER.search(p.with_suffix(".md").read_text(encoding="utf-8"))]


@pytest.mark.skipif(not WITH_CLAIMS, reason="no chapter states claims yet")
@pytest.mark.parametrize("profile", PROFILE_PARAMS)
@pytest.mark.parametrize("path", WITH_CLAIMS, ids=_ids(WITH_CLAIMS))
def test_prose_numbers_match_the_code(path: Path, profile: str):
    """Under the suite's profile and a workshop's: a number the prose states holds on both
    (a cell that talks about one GPU's numbers pins that profile and says so)."""
    stated = prose_claims(path.with_suffix(".md").read_text(encoding="utf-8"))
    run, _ = execute_notebook(path, profile)
    computed = computed_claims(run)
    missing = sorted(set(stated) - set(computed))
    assert not missing, f"{path.name}: the prose states {missing} but no cell computes them with claim()"
    unchecked = sorted(k for k in stated if computed[k] is None)
    if unchecked:
        warnings.warn(f"{path.name}: claims {unchecked} need the real PyTorch snapshots and were not "
                      f"checked (python -m allocator_ref traces fetch, or ../shared/traces)")
    wrong = {k: (stated[k], computed[k]) for k in stated if computed[k] is not None and stated[k] != computed[k]}
    assert not wrong, (f"{path.name} under profile {profile}: the prose and the code disagree "
                       f"(name: (prose, code)): {wrong}. "
                       f"Fix the text, or find out why the code changed.")


NO_REAL_TRACES = (("ALLOCATOR_REF_TRACES", "none"),)
REAL_TRACE_WITH_CLAIMS = [p for p in REAL_TRACE_CHAPTERS if p in WITH_CLAIMS]


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL_TRACE_WITH_CLAIMS, ids=_ids(REAL_TRACE_WITH_CLAIMS))
def test_prose_matches_the_code_without_the_real_traces(path: Path):
    """A clone without ../shared/traces: every claim either holds on the course-made trace or is one
    the cell declares unchecked (a statement about PyTorch's own snapshot); none is silently wrong."""
    stated = prose_claims(path.with_suffix(".md").read_text(encoding="utf-8"))
    run, _ = execute_notebook(path, extra_env=NO_REAL_TRACES)
    computed = computed_claims(run)
    missing = sorted(set(stated) - set(computed))
    assert not missing, f"{path.name} without real traces: the prose states {missing} but no cell computes them"
    wrong = {k: (stated[k], computed[k]) for k in stated if computed[k] is not None and stated[k] != computed[k]}
    assert not wrong, f"{path.name} without the real traces: the prose and the code disagree: {wrong}"


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
    """Sentences that read a cell's output and state a result in words, without a claim marker."""
    found, previous = [], None
    for cell in cells:
        if cell["cell_type"] == "markdown":
            for k, sentence in _sentences(cell["source"]):
                reads = (k == 0 and previous == "code") or READS_OUTPUT.search(sentence)
                if reads and RESULT_WORDS.search(sentence) and not MARKER.search(sentence):
                    found.append(sentence)
        previous = cell["cell_type"]
    return found


def test_the_result_words_reader_finds_an_unclaimed_result():
    cells = [{"cell_type": "code", "source": "x()"},
             {"cell_type": "markdown", "source": "Every rung failed: the segment is split."},
             {"cell_type": "markdown", "source": "A general rule: a block that fits is reused."},
             {"cell_type": "markdown", "source": "The table above shows that **every rung failed**"
                                                 "<!-- claim: q -->."}]
    assert unclaimed_results(cells) == ["Every rung failed: the segment is split."]


MARKDOWN_CHAPTERS = sorted(p.with_suffix(".md") for p in NOTEBOOKS if p.with_suffix(".md").exists())


@pytest.mark.parametrize("md", MARKDOWN_CHAPTERS, ids=[p.name for p in MARKDOWN_CHAPTERS])
def test_a_sentence_that_states_a_result_carries_a_claim(md: Path):
    import jupytext
    found = unclaimed_results(jupytext.read(md).cells)
    assert not found, (f"{md.name}: these sentences state a result of a cell in words but carry no claim; "
                       f"make the cell produce the words (claim(name, course.result_words(...))) and mark them "
                       f"**...**<!-- claim: name -->, or say it without a result word: {found}")
