"""Are the English and Chinese editions in step?  One function per question, each a list of problems.

``python -m allocator_ref.editions check`` prints them and ``tests/test_edition_zh.py`` fails on
them; the test that an English edit is caught runs the same functions on a copy of the course.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

from allocator_ref.editions import build, catalog

ROOT = catalog.ROOT


def _rel(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


def catalogue_problems(source: Path, root: Path = ROOT) -> list:
    """Every English block translated (non-empty, not fuzzy), by the FORMAT's rules, in Chinese."""
    path = catalog.catalogue_path(source, root)
    rel = _rel(source, root)
    if not path.exists():
        return [f"{rel}: no catalogue {_rel(path, root)} (python -m allocator_ref.editions update {rel}, "
                f"then translate it)"]
    po = catalog.load(path)
    if po.metadata.get("Language") != catalog.LANGUAGE:
        return [f"{_rel(path, root)}: header Language is {po.metadata.get('Language')!r}, not {catalog.LANGUAGE!r}"]
    done = catalog.translations(po)
    problems = []
    for block in catalog.english_blocks(source):
        where = f"{rel}: block {block[:70]!r}"
        if block not in done:
            entry = po.find(block)
            state = "fuzzy (its English changed: check the old translation)" if entry and entry.fuzzy else "untranslated"
            problems.append(f"{where} is {state}; run `make translations` and translate it in {_rel(path, root)}")
            continue
        chinese = done[block]
        problems += [f"{where}: {p}" for p in catalog.rule_problems(block, chinese)]
        runs = catalog.english_runs(chinese, catalog.NAMES)
        if runs:
            problems.append(f"{where}: English left in the Chinese prose: {runs[:3]}")
    return problems


def notebook_problems(source: Path, root: Path = ROOT) -> list:
    """The committed Chinese notebooks are what ``build`` writes now, with the English code cells."""
    problems = []
    wanted = build.rendered(source, root)
    english_for = {build.chinese_twin(source.with_suffix(".ipynb")): source.with_suffix(".ipynb")}
    if len(wanted) == 2:
        student = build.english_notebook_of(source, root)
        english_for[build.chinese_twin(student)] = student
    for path, text in wanted.items():
        rel = _rel(path, root)
        if not path.exists():
            problems.append(f"{rel} is missing: run `make translations`")
            continue
        if path.read_text(encoding="utf-8") != text:
            problems.append(f"{rel} differs from what `make translations` writes: regenerate it, never edit it")
        english = english_for[path]
        if english.exists():
            problems += [f"{rel}: {p}" for p in code_cell_problems(nbformat.read(english, as_version=4),
                                                                   nbformat.read(path, as_version=4))]
    return problems


def code_cell_problems(english, chinese) -> list:
    """The same cells in the same order; every code cell byte for byte, with its tags."""
    def shape(nb):
        return [(c.cell_type, c.source if c.cell_type == "code" else None,
                 list(c.get("metadata", {}).get("tags", []))) for c in nb.cells]
    a, b = shape(english), shape(chinese)
    if len(a) != len(b):
        return [f"{len(b)} cells, the English notebook has {len(a)}"]
    return [f"cell {i} differs from the English notebook's ({x[0]} cell)" for i, (x, y) in enumerate(zip(a, b))
            if x != y]


def stray_notebooks(root: Path = ROOT) -> list:
    """Chinese notebooks whose English source is gone (``build`` removes them)."""
    wanted = build.outputs(root)
    return [f"{_rel(p, root)} has no English source any more: run `make translations`" for p in build.stale(root)
            if p not in wanted]


def problems(root: Path = ROOT, sources: list | None = None) -> list:
    """Everything that keeps the two editions out of step."""
    found = []
    for source in sources if sources is not None else catalog.sources(root):
        found += catalogue_problems(source, root)
        if catalog.catalogue_path(source, root).exists():
            found += notebook_problems(source, root)
    found += stray_notebooks(root)
    if sources is None and root == ROOT:          # the tools' sentences belong to the package, not a root
        from allocator_ref.editions import tool_catalogues
        found += tool_catalogues.problems()
    return found
