"""Where a chapter's claim checks live, and how a test run puts them back in the kernel.

A chapter states a measured value in bold, ``reserved stays at **20.00 MiB**``, and its markdown cell's
metadata names what each bold value is, ``"claims": {"q4_reserved": "20.00 MiB"}``.  The code that
computes the value (``course.claim("q4_reserved", course.fmt(al.memory_reserved()))``) is not in the
notebook: it is a section of ``tests/claims/<chapter>.py``,

    # %% q4_reserved
    course.claim("q4_reserved", course.fmt(al.memory_reserved()))

and the code cell whose results it reads names that section in its metadata (``"claim_checks":
"q4_reserved"``).  ``with_checks`` inserts each section as a code cell right after that cell, so the
executed notebook records every claim where the old hidden cell did (same kernel, same state), while a
learner's notebook has no claim cell to open and no marker in the text they edit.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

CLAIMS_DIR = Path(__file__).resolve().parent / "claims"
SECTION = re.compile(r"^# %% ([\w.\-]+)[ \t]*$", re.M)
KEY = "claim_checks"           # code cell metadata: the section to run after the cell
RAN = "claim_checks_ran"       # the inserted cell's metadata: which section it is


def claims_file(notebook: Path) -> Path:
    """``chapters/04_x.ipynb`` and its Chinese twin ``chapters/zh/04_x.ipynb`` -> ``tests/claims/04_x.py``."""
    return CLAIMS_DIR / (Path(notebook).stem + ".py")


def sections(path: Path) -> dict:
    """{section name: its code} of one claims file (the text between ``# %% name`` lines)."""
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    marks = list(SECTION.finditer(text))
    return {m.group(1): text[m.end():(marks[k + 1].start() if k + 1 < len(marks) else len(text))].strip("\n")
            for k, m in enumerate(marks)}


def with_checks(nb, notebook: Path):
    """A copy of ``nb`` with each named section as a hidden code cell right after the cell naming it."""
    import nbformat
    code = sections(claims_file(notebook))
    run = copy.deepcopy(nb)
    cells = []
    for cell in run.cells:
        cells.append(cell)
        name = cell.get("metadata", {}).get(KEY)
        if cell.cell_type != "code" or not name:
            continue
        if name not in code:
            raise AssertionError(f"{Path(notebook).name}: a cell names claim checks {name!r}, but "
                                 f"{claims_file(notebook).relative_to(CLAIMS_DIR.parent.parent)} has no "
                                 f"'# %% {name}' section")
        cells.append(nbformat.v4.new_code_cell(code[name], metadata={"tags": ["remove-cell"], RAN: name}))
    run.cells = cells
    return run


def named_sections(nb) -> list:
    """The sections the notebook's code cells name, in order."""
    return [c.metadata[KEY] for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get(KEY)]


def stated(nb) -> dict:
    """{claim name: the bold value the prose states} over the notebook's markdown cells; each value must
    stand in its cell's text as ``**value**`` and each name be claimed once."""
    found: dict = {}
    for cell in nb.cells:
        claims = cell.get("metadata", {}).get("claims", {}) if cell.cell_type == "markdown" else {}
        for name, value in claims.items():
            if f"**{value}**" not in cell.source:
                raise AssertionError(f"claim {name!r}: its cell's text has no **{value}** (the metadata "
                                     f"names the bold value it covers); found {cell.source[:80]!r}...")
            if name in found:
                raise AssertionError(f"claim {name!r} is stated twice in the prose")
            found[name] = value
    return found
