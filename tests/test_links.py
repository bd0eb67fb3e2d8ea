"""Every notebook the course text points at exists.

The chapters and labs link to each other by path (``labs/student/lab05_grow_it.ipynb``,
``../chapters/05_vmm_and_expandable_segments.ipynb``).  A renamed lab or chapter leaves a dead link
that no notebook run notices, so this test reads the Markdown sources and checks every
``labs/student/*.ipynb`` and ``chapters/*.ipynb`` path they mention.  Templates that name no real
file (``labNN_name.ipynb``, ``chapters/*.ipynb``) are skipped.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([*ROOT.glob("chapters/*.md"), *ROOT.glob("labs/source/*.md"),
               ROOT / "labs" / "README.md", ROOT / "README.md"])
NOTEBOOK_PATH = re.compile(r"(?:labs/student|chapters)/[^\s/()\[\]`'\"<>]+\.ipynb")
TEMPLATE = re.compile(r"[*{}<>]|NN")


def mentions(doc: Path) -> list:
    """(line number, path relative to the repository root) of each notebook path in ``doc``."""
    found = []
    for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for m in NOTEBOOK_PATH.finditer(line):
            if not TEMPLATE.search(m.group(0)):
                found.append((n, m.group(0)))
    return found


def test_the_documents_mention_notebooks():
    assert all(doc.exists() for doc in DOCS)
    everything = {p for doc in DOCS for _, p in mentions(doc)}
    assert any(p.startswith("labs/student/") for p in everything)
    assert any(p.startswith("chapters/") for p in everything)


def test_the_pattern_reads_relative_links_and_skips_templates(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("[lab](../labs/student/lab05_grow_it.ipynb) and `labs/student/labNN_name.ipynb`, "
                   "chapters/*.ipynb, (chapters/05_vmm_and_expandable_segments.ipynb)\n")
    assert mentions(doc) == [(1, "labs/student/lab05_grow_it.ipynb"),
                             (1, "chapters/05_vmm_and_expandable_segments.ipynb")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_mentioned_notebook_exists(doc):
    missing = [f"{doc.relative_to(ROOT)}:{n}: {p}" for n, p in mentions(doc) if not (ROOT / p).exists()]
    assert not missing, "dead notebook links:\n" + "\n".join(missing)
