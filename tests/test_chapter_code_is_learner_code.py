"""A chapter's visible code is what a learner reads and copies: it uses the API they would use (PyTorch's
names, a snapshot), never the course's checks or the model's private members. The claim checks live in
tests/claims/<chapter>.py, run after the cell that names them (tests/claim_checks.py); other course-only
cells are hidden (tag remove-cell, jupyter.source_hidden)."""
import ast
import re
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("0*.md"))
CHECKS = {"claim", "claim_needs_real_trace", "result_words"}
# course.claim calls allowed in a visible cell: none (compute the value into a plain variable in
# the visible cell, claim it in the chapter's claims file, in the section the cell names).
MAX_VISIBLE_CLAIMS = 0


def visible_code(path):
    for cell in jupytext.read(path).cells:
        if cell.cell_type == "code" and "remove-cell" not in cell.metadata.get("tags", []):
            yield cell.source


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_private_member_in_visible_chapter_code(path):
    found = []
    for source in visible_code(path):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and re.fullmatch(r"_[a-z]\w*", node.attr):
                found.append(f".{node.attr}")
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "device_allocator"):
                found.append(f".device_allocator.{node.attr}")
    assert not found, f"{path.name}: visible code reaches into the model's internals: {sorted(set(found))}"


def test_course_checks_stay_out_of_sight():
    visible = 0
    for path in CHAPTERS:
        for source in visible_code(path):
            visible += sum(1 for n in ast.walk(ast.parse(source))
                           if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in CHECKS
                           and getattr(n.func.value, "id", "") == "course")
    assert visible <= MAX_VISIBLE_CLAIMS, (
        f"{visible} course.claim/result_words calls in visible chapter code (at most {MAX_VISIBLE_CLAIMS}): put "
        "new checks in the hidden cell after the one that computes them")
