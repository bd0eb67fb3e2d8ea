"""Course text and code cite PyTorch functions, NVIDIA docs or the course's own files, never a
"spec N" section: learners do not have the spec, so such a reference is a dangling link."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The spec's files (and ../shared/spec, where they live) are not in a clone either.
PATTERN = re.compile(r"spec §|spec [0-9]|§[0-9]|spec sections? [0-9]|spec pytorch-allocator|pytorch-allocator\.md|"
                     r"peer-allocators\.md|learner-questions\.md|shared/spec|\\u00a7[0-9]")
WHERE = ("allocator_ref", "chapters", "labs/source", "labs/README.md", "tools", "benchmarks", "README.md")


def test_no_spec_section_reference_in_code_or_notebooks():
    hits = []
    for folder in WHERE:
        paths = [ROOT / folder] if (ROOT / folder).is_file() else sorted((ROOT / folder).rglob("*"))
        for path in paths:
            if path.suffix not in (".py", ".md", ".ipynb", ".json") or not path.is_file():
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PATTERN.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not hits, "cite the PyTorch function or the chapter instead:\n" + "\n".join(hits)
