"""The numbers a chapter states in its prose are the numbers its code produces.

A chapter states a key number in its text as

    reserved stays at **20.00 MiB**<!-- claim: q4_reserved -->

and computes it in a code cell with ``_course.claim("q4_reserved", value)``,
which displays the value (mimetype ``application/vnd.allocator-ref.claim+json``).
Here every chapter is executed once (shared with ``test_notebooks.py``), and
for each claim in the prose the executed value must equal the stated text
exactly.  So the text cannot drift from the code: change a default, a profile
or an allocator rule and the chapter whose prose relied on it fails here.

Rules checked:
* every ``<!-- claim: name -->`` marker directly follows a bold ``**value**``;
* every claim in the prose is computed by the notebook, with the same value;
* a name is claimed once in the prose (one number, one place to fix).
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from test_notebooks import CHAPTERS, NOTEBOOKS, PROFILE_PARAMS, _ids, execute_notebook

CLAIM_MIME = "application/vnd.allocator-ref.claim+json"
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
