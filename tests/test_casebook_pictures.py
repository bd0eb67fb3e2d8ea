"""Chapter 9 shows every case's mechanism in a picture, and its index sends each symptom to a case.

Every other chapter draws what it explains; the casebook had no picture at all.  A case's picture is
the block map the doctor draws (``course.show_blockmap``) or a memory-over-time chart
(``course.show_fig``), made in the case's own cells.  Case 6 is about when a configuration string is
read: nothing in memory differs, so it has no picture (said here, so the exception is deliberate).
"""
from __future__ import annotations

import re
from pathlib import Path

CASEBOOK = Path(__file__).resolve().parents[1] / "chapters" / "09_casebook.md"
NO_PICTURE = {6: "when PYTORCH_CUDA_ALLOC_CONF is read: no memory state to draw"}


def _cases() -> dict:
    text = CASEBOOK.read_text()
    parts = re.split(r"^## Case (\d+):", text, flags=re.M)
    return {int(number): body.split("\n## ", 1)[0] for number, body in zip(parts[1::2], parts[2::2])}


def test_every_case_draws_its_mechanism():
    cases = _cases()
    assert sorted(cases) == list(range(1, 14))          # case 13, the diff of two runs, came with issue 56
    missing = [n for n, body in cases.items()
               if n not in NO_PICTURE and not re.search(r"course\.show_(blockmap|fig)\(", body)]
    assert missing == [], f"cases without a picture: {missing}"


def test_the_index_sends_every_case_a_symptom():
    text = CASEBOOK.read_text()
    index = text.split("Find your symptom", 1)[1].split("\n## ", 1)[0]
    linked = {int(n) for n in re.findall(r"\| \[(\d+)\]\(#case-\d+-", index)}
    assert linked == set(range(1, 14))
    for n, anchor in re.findall(r"\| \[(\d+)\]\((#[^)]+)\)", index):
        assert anchor.startswith(f"#case-{n}-"), anchor
