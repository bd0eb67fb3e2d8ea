"""Write the Chinese notebooks from the English sources and the catalogues (``make translations``).

Where a learner finds them (``make lab`` opens chapter 0 of the learner's language):

    chapters/NN_name.md          -> chapters/zh/NN_name.ipynb
    labs/source/labNN_name.md    -> labs/source/zh/labNN_name.ipynb   (the instructor's, with solutions)
                                 -> labs/student/zh/labNN_name.ipynb  (the learner's copy, made by the
                                    same ``allocator_ref.labs.generate.build_notebook`` as the English one)

Each is committed, like the English student copies, and ``check`` (and the tests) fail when a
committed one differs from what this module writes now.  Every code cell is the English source's
cell, byte for byte, with its tags; each markdown cell is its blocks (``catalog.split_blocks``)
replaced by their translations and joined by a blank line, its ``claims`` metadata giving the values
as the Chinese states them (``chinese_claims``).  A block with no translation yet stays
English, so the notebook still runs, and ``untranslated`` names it.

Relative link targets are kept as the English wrote them in the catalogue and re-pointed here:
resolved from the English notebook's folder, sent to the Chinese twin where one exists, and made
relative to the Chinese notebook's folder.  The "Open in Colab" URL is re-pointed the same way.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

from allocator_ref.editions import catalog
from allocator_ref.editions.language import MARKER

ROOT = catalog.ROOT
LANG_DIR = "zh"
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
COLAB = re.compile(r"(https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/)([^)\s]+)")


def english_notebook_of(source: Path, root: Path = ROOT) -> Path:
    """The notebook a learner opens for an English source (the student copy for a lab)."""
    if source.parent.name == "source" and source.parent.parent.name == "labs":
        return root / "labs" / "student" / (source.stem + ".ipynb")
    return source.with_suffix(".ipynb")


def chinese_twin(english: Path) -> Path:
    """``chapters/03_x.ipynb`` -> ``chapters/zh/03_x.ipynb`` (the same rule for both lab folders)."""
    return english.parent / LANG_DIR / english.name


def outputs_for(source: Path, root: Path = ROOT) -> list:
    """The Chinese notebooks written for one English source."""
    if source.parent.name == "source" and source.parent.parent.name == "labs":
        return [chinese_twin(source.with_suffix(".ipynb")), chinese_twin(english_notebook_of(source, root))]
    return [chinese_twin(source.with_suffix(".ipynb"))]


def _has_twin(target: Path, root: Path) -> bool:
    """Every chapter and lab notebook has a Chinese twin (whether or not its catalogue is done yet),
    so a link does not change when another catalogue lands."""
    if target.suffix != ".ipynb":
        return False
    if target.parent.name == "student":
        source = target.parent.parent / "source" / (target.stem + ".md")
    else:
        source = target.with_suffix(".md")
    return source.resolve() in {s.resolve() for s in catalog.sources(root)}


def repoint_links(text: str, english_dir: Path, chinese_dir: Path, root: Path = ROOT) -> str:
    """Relative links as the English wrote them, made to work from the Chinese notebook's folder."""
    import os

    def local(m):
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = (english_dir / path).resolve()
        if not resolved.exists() and (chinese_dir / path).resolve().exists():
            return m.group(0)                  # already written for the Chinese folder
        if _has_twin(resolved, root):
            resolved = chinese_twin(resolved)
        new = os.path.relpath(resolved, chinese_dir).replace(os.sep, "/")
        return m.group(1) + new + (("#" + anchor) if anchor else "") + m.group(3)

    def colab(m):
        rel = m.group(2)
        english = root / rel
        if _has_twin(english, root):
            rel = chinese_twin(english).relative_to(root).as_posix()
        return m.group(1) + rel

    return COLAB.sub(colab, LINK.sub(local, text))


def translate_markdown(text: str, table: dict) -> tuple[str, list]:
    """(the cell in Chinese, [English blocks with no translation])."""
    out, missing = [], []
    for block in catalog.split_blocks(text):
        if block in table:
            out.append(table[block])
        else:
            out.append(block)
            missing.append(block)
    return "\n\n".join(out), missing


def chinese_notebook(source: Path, root: Path = ROOT, table: dict | None = None):
    """The Chinese twin of an English source, as a notebook object (the English cells, translated)."""
    if table is None:
        path = catalog.catalogue_path(source, root)
        table = catalog.translations(catalog.load(path)) if path.exists() else {}
    nb = catalog.read_notebook(source)
    english_dir = english_notebook_of(source, root).parent
    chinese_dir = chinese_twin(english_notebook_of(source, root)).parent
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            text, _ = translate_markdown(cell.source, table)
            cell.source = repoint_links(text, english_dir, chinese_dir, root)
            if cell.metadata.get("claims"):
                cell.metadata["claims"] = chinese_claims(cell.metadata["claims"], cell.source)
    return nb


def chinese_claims(claims: dict, chinese: str) -> dict:
    """A markdown cell's claims as its Chinese text states them: the course catalogue's Chinese of a
    result phrase where the text has it in bold (the Chinese run's ``result_words`` computes the same),
    else the English value (a number, a name, PyTorch's own text)."""
    said = {}
    for name, value in claims.items():
        zh = catalog.claimed_in_chinese(value)
        said[name] = zh if f"**{zh}**" in chinese else value
    return said


def _metadata(source: Path, root: Path) -> dict:
    rel = source.resolve().relative_to(root.resolve()).as_posix()
    po = catalog.catalogue_path(source, root).relative_to(root).as_posix()
    return {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "allocator_ref": {"generated_from": [rel, po], "language": catalog.LANGUAGE,
                          "note": "Generated by `make translations` (python -m allocator_ref.editions build). "
                                  "Do not edit: edit the English source or the catalogue and regenerate."},
    }


def _plain(nb, prefix: str):
    """A clean notebook of the same cells: no outputs, stable ids, tags and Jupyter metadata kept."""
    cells = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(cell.source)
        else:
            new = nbformat.v4.new_markdown_cell(cell.source)
        for key in ("tags", "jupyter", "claims", "claim_checks"):    # claims: the tests read them
            if key in cell.get("metadata", {}):
                new.metadata[key] = cell.metadata[key]
        new.id = f"{prefix}-{i:02d}"
        cells.append(new)
    return nbformat.v4.new_notebook(cells=cells)


# Each source is rendered once per run: `build` writes, then says what is stale and what the in-step
# check finds, and each of those asked for every notebook again (five renders per notebook).  Keyed on
# the texts the rendering reads, so an edit between two calls (a test's copy of the course) renders anew.
_RENDERED: dict = {}


def rendered(source: Path, root: Path = ROOT) -> dict:
    """{Chinese notebook path: its text} for one English source (rendered once per content)."""
    po = catalog.catalogue_path(source, root)
    key = (str(source.resolve()), str(root.resolve()), source.read_text(encoding="utf-8"),
           po.read_text(encoding="utf-8") if po.exists() else None)
    if key not in _RENDERED:
        if len(_RENDERED) > 64:
            _RENDERED.clear()
        _RENDERED[key] = _render(source, root)
    return dict(_RENDERED[key])


def _render(source: Path, root: Path) -> dict:
    from allocator_ref.labs import generate

    nb = chinese_notebook(source, root)
    number = source.stem.split("_")[0]
    outputs = outputs_for(source, root)
    first = _plain(nb, f"zh-{number}")
    first.metadata = _metadata(source, root)
    result = {outputs[0]: nbformat.writes(first) + "\n"}
    if len(outputs) == 2:                      # a lab: the learner's copy, solutions cut as in English
        student, _ = generate.build_notebook(nb, source)
        student.metadata = _metadata(source, root)
        for cell in student.cells:
            cell.id = "zh-" + cell.id
        result[outputs[1]] = nbformat.writes(student) + "\n"
    return result


def translated_sources(root: Path = ROOT) -> list:
    """The English sources that have a catalogue (their Chinese edition is built)."""
    return [s for s in catalog.sources(root) if catalog.catalogue_path(s, root).exists()]


def outputs(root: Path = ROOT) -> dict:
    result = {}
    for source in translated_sources(root):
        result.update(rendered(source, root))
    for folder in {p.parent for p in result}:       # a kernel started here speaks Chinese (language.py)
        result[folder / MARKER] = "zh\n"
    return result


def stale(root: Path = ROOT) -> list:
    """Chinese notebooks that differ from what ``build`` would write now, or whose source is gone."""
    wanted = outputs(root)
    bad = [p for p, text in wanted.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    for folder in (root / "chapters" / LANG_DIR, root / "labs" / "source" / LANG_DIR,
                   root / "labs" / "student" / LANG_DIR):
        bad += [p for p in sorted(folder.glob("*.ipynb")) if p not in wanted]
    return bad


def write_all(root: Path = ROOT) -> list:
    """Write every Chinese notebook that changed; remove those whose source is gone.  Returns the paths."""
    wanted = outputs(root)
    changed = []
    for p in stale(root):
        if p not in wanted:
            p.unlink()
            changed.append(p)
    for p, text in wanted.items():
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
            changed.append(p)
    return changed
