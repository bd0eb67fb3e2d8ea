"""Course text, code and tests cite PyTorch functions, NVIDIA docs or the course's own files, never
a section of the spec: learners do not have it (it lives outside the repository), so such a
reference is a dangling link.

Every text file of a clone is read, tests included: a test that says "spec 11.1" leaves its reader
as stranded as a chapter would.  The first test shows the pattern on the forms such citations took
(and on the course's own ``spec`` words it must leave alone), so a pattern that stops matching
them fails here before a citation slips through."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATTERN = re.compile(
    r"\b[Ss]pec(?:'s)?\s*(?:§|sections?)?\s*\d"     # spec 1.2, Spec 1.4, spec section 10, spec §4
    r"|§\s*\d|\\u00a7\d"                               # a bare §4.6 (escaped, in a notebook's JSON)
    r"|\b[Tt]he spec\b(?!\.\w)"                        # "restated from the spec", "the spec's rules"
    # the spec's files (and ../shared/spec, where they live) are not in a clone either
    r"|pytorch-allocator\.md|peer-allocators\.md|learner-questions\.md|shared/spec")
TEXT = {".py", ".md", ".ipynb", ".json", ".toml", ".yml", ".yaml", ".sh", ".txt", ".cfg", ".html",
        ".js", ".css", ""}
# Not the course's text: version control, environments, caches and build outputs.
SKIP = {".git", ".venv", "node_modules", "__pycache__", ".hypothesis", ".pytest_cache",
        ".ipynb_checkpoints", "build", "dist", "_build", ".run", ".whl", ".gl"}
THIS = Path(__file__).resolve()           # spells the patterns out, so it is the one file skipped


@pytest.mark.parametrize("line,cites", [
    ("# --------------- spec 1.2 round_size", True),
    ('"""PyTorch test_allocator_settings\' helper (spec 11.1): next power of two"""', True),
    ("# spec 4.6 worked examples", True),
    ('"""Spec 1.4 format_size: <=1024 bytes"""', True),
    ("# no IPC (spec section 10): a clear error", True),
    ("plus the structural invariants of spec 2/4.", True),
    ("see §4.6 for the numbers", True),
    ("Every expected number is computed by hand from the spec's rules", True),
    ('"""PYTORCH_CUDA_ALLOC_CONF parsing and validation, restated from the spec."""', True),
    ("Everything here is restated from ``shared/spec/pytorch-allocator.md``", True),
    # the course's own words that contain "spec" and cite nothing
    ("from .spec import Edge, edges  # noqa: E402", False),
    ("# Each is met by the hidden cases of every seed: see spec.edges.", False),
    ('nb.metadata["kernelspec"] = {"name": "python3"}', False),
    ("spec = importlib.util.spec_from_file_location(name, path)", False),
    ("def _fmt(v, spec: str = \".2f\") -> str:", False),
    ("The per-user cache (XDG Base Directory spec): $XDG_CACHE_HOME", False),
])
def test_the_pattern_knows_a_spec_citation_when_it_sees_one(line, cites):
    assert bool(PATTERN.search(line)) is cites, line


def _course_files():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP or part.endswith(".egg-info") for part in rel.parts):
            continue
        if path.is_file() and path.suffix in TEXT and path.resolve() != THIS:
            yield path


def test_the_scan_reads_tests_tools_and_the_course():
    seen = {p.relative_to(ROOT).as_posix() for p in _course_files()}
    for expected in ("tests/test_caching_rules.py", "tests/caching_helpers.py", "allocator_ref/sharing/handles.py",
                     "chapters/06_zero_copy_and_ipc.md", "labs/README.md", "README.md", "Makefile"):
        assert expected in seen, f"the scan misses {expected}"
    assert "tests/test_no_spec_references.py" not in seen


def test_no_spec_section_reference_anywhere_in_the_course():
    hits = []
    for path in _course_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue                      # not text after all (a binary without a suffix)
        for n, line in enumerate(text.splitlines(), 1):
            if PATTERN.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not hits, "cite the PyTorch function or test, or the chapter, instead:\n" + "\n".join(hits)
