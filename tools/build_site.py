"""Build the course website with Jupyter Book 1 (Sphinx): `make site` -> _build/html/index.html.

What goes in (picked up by globbing, so a new chapter or lab needs no edit here):

* a learner's start page (``START_HERE.md``) as the home page, with the FAQ of learner
  questions (from the README) as its own page whose links land on the chapter section that
  answers each question;
* every ``chapters/*.ipynb``, executed here on the simulated device (cells tagged ``gpu``
  are shown, not run), so every picture is in the page; an ipywidget shows a static
  snapshot of its HTML parts (from the widget state nbclient saves with the run) instead of a blank box, and the chapters'
  own film strips (``show_frames``) follow each player;
* the labs as learners get them (``labs/student/*.ipynb``, not executed), and, in their own
  "Instructors" section, the guides (``labs/README.md``, ``workshop/README.md``) and the README;
* the Chinese edition in its own sections (``README.zh-CN.md``, the glossary, ``chapters/zh``
  executed like the English chapters, ``labs/student/zh``), each page of either edition opening
  with a link to its twin in the other language (the language switch).

How: the pages are staged in ``_build/site-src`` (links to files that are not pages become
links to the repository on GitHub), then ``jupyter-book build`` (Jupyter Book 1: Sphinx,
MyST-NB and sphinx-book-theme, all from PyPI) renders them.  Why not Jupyter Book 2: its
book theme is not a PyPI or npm package; mystmd downloads it from its own host at build time,
and a course built in a room or a CI machine without that host must still publish.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "_build" / "site-src"
OUT = ROOT / "_build" / "html"
HOME = "START_HERE.md"                              # the learner's start page: the site opens on it
ZH = "zh"                                           # the Chinese edition's folder (allocator_ref/editions)
ZH_PAGES = ("README.zh-CN.md", "chapters/zh/glossary.md", "labs/README.zh-CN.md", "workshop/README.zh-CN.md")
GUIDES = ("labs/README.md", "workshop/README.md")  # the instructors' section, with the README
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def widget_snapshot(states: dict, model_id: str) -> str:
    """The HTML a widget's parts show, read from the widget state nbclient saved with the run
    (``nb.metadata.widgets``): an ``HTML`` widget's value, a box's children in order, nothing for
    a control (a slider or a button cannot be drawn without a kernel)."""
    state = states.get(model_id, {}).get("state", {})
    if state.get("_model_name") == "HTMLModel":
        return state.get("value", "")
    return "".join(widget_snapshot(states, child.removeprefix("IPY_MODEL_")) for child in state.get("children", []))


def widget_snapshots(nb) -> int:
    """Give each widget output a text/html twin, the HTML its parts showed, which the static page
    renders instead of the live widget it cannot run.  Returns how many outputs got one."""
    states = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    added = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is not None and "text/html" not in out["data"]:
                out["data"]["text/html"] = '<div class="widget-snapshot">' + widget_snapshot(states, view["model_id"]) + "</div>"
                added += 1
    return added


def repository() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


# ------------------------------------------------------------------ chapters

def for_the_page(nb) -> int:
    """Drop the Colab bootstrap (it only matters on Colab) and move the "Open in Colab" link
    below the title, so that the notebook's first heading stays the page title."""
    link = [c for c in nb.cells if c.cell_type == "markdown" and "colab" in c.metadata.get("tags", [])]
    nb.cells = [c for c in nb.cells if "colab" not in c.metadata.get("tags", [])]
    title = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    nb.cells[title + 1:title + 1] = link
    return title + 1              # where code may be added without hiding the title


def twin(path: Path) -> Path | None:
    """The same page in the other language: chapters/03_x.ipynb <-> chapters/zh/03_x.ipynb."""
    other = path.parent.parent / path.name if path.parent.name == ZH else path.parent / ZH / path.name
    return other if other.exists() else None


def language_switch(nb, path: Path) -> int:
    """Put a link to the page's twin in the other language right under the title (chapter 0 of
    each edition already links the other and gets none)."""
    other = twin(path)
    if other is None:
        return 0
    target = os.path.relpath(other, path.parent).replace(os.sep, "/")
    if any(f"]({target})" in c.source for c in nb.cells if c.cell_type == "markdown"):
        return 0
    label = "[English](" if path.parent.name == ZH else "[中文版]("
    title = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    nb.cells.insert(title + 1, nbformat.v4.new_markdown_cell(f"{label}{target})"))
    return 1                      # cells after the title moved down by one


def section_links(nb, path: Path) -> int:
    """A Chinese chapter translates its headings, so their anchors are not the English ones; its
    links to its own sections (``](#case-1-...)``, kept as the English wrote them) are pointed at
    the Chinese heading in the same place.  Returns how many links were changed."""
    other = twin(path)
    if path.parent.name != ZH or other is None:
        return 0

    def section_ids(book) -> list[str]:
        return [heading_id(m.group(1).strip()) for c in book.cells if c.cell_type == "markdown"
                for m in re.finditer(r"(?m)^#{2,6} (.+)$", c.source)]

    english, chinese = section_ids(nbformat.read(other, as_version=4)), section_ids(nb)
    if len(english) != len(chinese):
        return 0                  # not the same sections: -W reports any link that resolves to nothing
    moved = {e: z for e, z in zip(english, chinese) if e != z and e not in chinese}
    changed = 0

    def point(m):
        nonlocal changed
        if m.group(1) not in moved:
            return m.group(0)
        changed += 1
        return f"](#{moved[m.group(1)]})"
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = re.sub(r"\]\(#([^)\s]+)\)", point, cell.source)
    return changed


def static_outputs(nb) -> None:
    """Keep what a static page can show.  A widget shows its HTML snapshot, not its live view
    (MyST-NB prefers the view, and a static page has no kernel to draw it: an empty box).  The
    course's own data outputs (``application/vnd.allocator-ref.*``, read by the tests) show their
    text, as JupyterLab does for a mime type it has no renderer for."""
    nb.metadata.pop("widgets", None)                   # no widget state: no widget JavaScript
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]
            for mime in [m for m in data if m.startswith("application/vnd.allocator-ref.")]:
                del data[mime]


def run_chapter(path: Path) -> tuple:
    """``make site``'s own run of one chapter on the simulated device, as a learner's Run All except
    that cells tagged ``gpu`` are shown, not run: (executed notebook, seconds)."""
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "gpu" in cell.get("metadata", {}).get("tags", []):
            cell.metadata.setdefault("tags", []).append("skip-execution")   # nbclient skips it
    start = time.monotonic()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb, time.monotonic() - start


def page_of(run, path: Path):
    """The page of an executed chapter, whoever ran it (``run_chapter``, or the test suite, whose
    chapter runs add hidden claim checks): hidden cells dropped, ``gpu`` cells shown without what a
    machine with no GPU printed, widgets as their snapshots, the Colab bootstrap gone, the language
    switch under the title."""
    run.cells = [c for c in run.cells if "remove-cell" not in c.get("metadata", {}).get("tags", [])]
    for cell in run.cells:
        if cell.cell_type == "code" and "gpu" in cell.get("metadata", {}).get("tags", []):
            cell.outputs = []
    widget_snapshots(run)
    for_the_page(run)
    language_switch(run, path)
    section_links(run, path)
    static_outputs(run)
    return run


def execute(path: Path, run=run_chapter) -> tuple[Path, float]:
    """Run one chapter (``run``: path -> (executed notebook, seconds)); write its page to the stage."""
    executed, seconds = run(path)
    dest = STAGE / path.relative_to(ROOT)
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(page_of(executed, path), dest)
    return dest, seconds


# ------------------------------------------------------------------ links and the FAQ

def heading_id(text: str) -> str:
    """The anchor MyST-Parser gives a heading (``myst_heading_anchors``): its slug of the
    heading's text, inline code included.  Sphinx resolves ``page.ipynb#slug`` to the section."""
    from myst_parser.mdit_to_docutils.base import default_slugify
    return default_slugify(re.sub(r"[`*]", "", text))


def headings(md: Path) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"(?m)^#{2,6} (.+)$", md.read_text())]


FAQ_ROW = re.compile(r'^\| (Q\d+) (.+?) \| \[(\d+)\]\((chapters/[^)]+\.ipynb)\) "([^"]+)"(.*)\|$')


def faq_entries(readme: str) -> list[dict]:
    """Each README FAQ row: question, chapter notebook, the section that answers it and its id."""
    entries = []
    for line in readme.splitlines():
        m = FAQ_ROW.match(line.strip())
        if not m:
            continue
        q, question, _, notebook, section, _rest = m.groups()
        wanted = section.rstrip("…").strip()
        titles = headings(ROOT / notebook.replace(".ipynb", ".md"))
        found = (next((t for t in titles if re.sub(r"[`*]", "", t).startswith(re.sub(r"[`*]", "", wanted))), None)
                 or next((t for t in titles if re.search(rf"\b{q}\b", t)), None))
        if found is None:
            raise SystemExit(f"README FAQ {q}: no section {section!r} in {notebook}; fix the README row")
        entries.append({"q": q, "question": question, "notebook": notebook, "section": found,
                        "id": heading_id(found)})
    return entries


def faq_page(entries: list[dict]) -> str:
    lines = ["# FAQ: the questions engineers actually ask", "",
             "Each question (from public PyTorch issues and forums) is answered, with a runnable "
             "reproduction, in the chapter section it links to.", "",
             "| | question | answered in |", "|---|---|---|"]
    for e in entries:
        section = e["section"].replace("|", "\\|")
        lines.append(f"| {e['q']} | {e['question']} | [{section}]({e['notebook']}#{e['id']}) |")
    return "\n".join(lines) + "\n"


LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
BADGE = re.compile(r"\[!\[([^\]]*)\]\([^)]*\)\]\(([^)]+)\)")


def unbadge(text: str) -> str:
    """[![Binder](badge.svg)](url) -> [Binder](url): the page fetches nothing from other sites."""
    return BADGE.sub(r"[\1](\2)", text)


def relink(text: str, page: Path, pages: set[str], repo: str) -> str:
    """Links to staged pages stay; links to anything else in the repository go to GitHub."""
    def fix(m):
        target, anchor = m.group(1), m.group(2) or ""
        if re.match(r"^[a-z]+:", target):
            return m.group(0)
        resolved = os.path.normpath((page.parent / target).as_posix())
        if resolved in pages:
            return m.group(0)
        if resolved.startswith(".."):
            return f"]({repo}{anchor})"                        # outside the repository (../shared)
        return f"]({repo}/blob/main/{resolved}{anchor})"
    return LINK.sub(fix, text)


# ------------------------------------------------------------------ the book

def config_yml(repo: str) -> str:
    return (
        "# Generated by tools/build_site.py for one build; edit that tool, not this file.\n"
        "title: GPU memory allocators, from cudaMalloc to expandable segments\n"
        "author: the allocator course\n"
        "only_build_toc_files: true\n"
        "execute:\n"
        "  execute_notebooks: 'off'          # build_site.py ran them, several at once\n"
        "repository:\n"
        f"  url: {repo}\n"
        "  branch: main\n"
        "html:\n"
        "  use_repository_button: true\n"
        "sphinx:\n"
        "  config:\n"
        "    myst_heading_anchors: 6          # chapter.ipynb#section links (the FAQ's)\n"
        "    html_show_copyright: false\n"
        "    suppress_warnings: [myst.header]  # chapters start at ##, under the notebook title\n")


def toc_yml(chapters: list[str], labs: list[str], zh_chapters: list[str] = (), zh_labs: list[str] = ()) -> str:
    def entries(files):
        return "".join(f"      - file: {Path(f).with_suffix('').as_posix()}\n" for f in files)
    chinese = ("  - caption: 中文版\n"
               "    chapters:\n" + entries([*ZH_PAGES, *zh_chapters])) if zh_chapters else ""
    chinese += ("  - caption: 中文版实验\n"
                "    chapters:\n" + entries(zh_labs)) if zh_labs else ""
    return (
        "# Generated by tools/build_site.py for one build.\n"
        "format: jb-book\n"
        f"root: {Path(HOME).stem}\n"
        "parts:\n"
        "  - caption: Start\n"
        "    chapters:\n"
        "      - file: faq\n"
        "  - caption: Chapters\n"
        "    chapters:\n" + entries(chapters) +
        "  - caption: Labs\n"
        "    chapters:\n" + entries(labs) +
        "  - caption: Instructors\n"
        "    chapters:\n" + entries([*GUIDES, "README.md"]) + chinese)


def stage(jobs: int, run=run_chapter) -> dict[str, float]:
    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    repo = repository()
    chapters = sorted(p for p in (ROOT / "chapters").glob("*.ipynb"))
    labs = sorted((ROOT / "labs" / "student").glob("*.ipynb"))
    zh_chapters = sorted((ROOT / "chapters" / ZH).glob("*.ipynb"))
    zh_labs = sorted((ROOT / "labs" / "student" / ZH).glob("*.ipynb"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        timings = {dest.relative_to(STAGE).as_posix(): seconds
                   for dest, seconds in pool.map(lambda path: execute(path, run), chapters + zh_chapters)}
    (STAGE / "labs" / "student" / ZH).mkdir(parents=True)
    for lab in labs + zh_labs:
        nb = nbformat.read(lab, as_version=4)
        for_the_page(nb)
        language_switch(nb, lab)
        nbformat.write(nb, STAGE / lab.relative_to(ROOT))
    readme = (ROOT / "README.md").read_text()
    zh_pages = [name for name in ZH_PAGES if (ROOT / name).exists()] if zh_chapters else []
    pages = ({p.relative_to(ROOT).as_posix() for p in chapters + labs + zh_chapters + zh_labs}
             | {HOME, "README.md", "faq.md", *GUIDES, *zh_pages})
    for name in (HOME, "README.md", *GUIDES, *zh_pages):
        dest = STAGE / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(relink(unbadge((ROOT / name).read_text(encoding="utf-8")), Path(name), pages, repo),
                        encoding="utf-8")
    (STAGE / "faq.md").write_text(faq_page(faq_entries(readme)))
    (STAGE / "_config.yml").write_text(config_yml(repo))
    (STAGE / "_toc.yml").write_text(encoding="utf-8", data=toc_yml([p.relative_to(ROOT).as_posix() for p in chapters],
                                            [p.relative_to(ROOT).as_posix() for p in labs],
                                            [p.relative_to(ROOT).as_posix() for p in zh_chapters],
                                            [p.relative_to(ROOT).as_posix() for p in zh_labs]))
    return timings


def build(jobs: int = 2, run=run_chapter) -> Path:
    """Stage and render the site; ``run`` executes a chapter (the test suite passes the runs its
    chapter tests already made, so the site is built from them instead of running every chapter again)."""
    saved = dict(os.environ)
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ["ALLOCATOR_REF_DEVICE"] = "sim"               # the kernels inherit it
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    start = time.monotonic()
    try:
        timings = stage(jobs, run)
        book = Path(sys.executable).parent / "jupyter-book"
        # -W: a link or FAQ anchor that resolves to nothing fails the build instead of a dead link
        subprocess.run([str(book), "build", str(STAGE), "--builder", "html", "-W", "--keep-going", "-q"],
                       check=True)
    finally:                      # a caller in the same process (a test) keeps its own settings
        os.environ.clear()
        os.environ.update(saved)
    if OUT.exists():
        shutil.rmtree(OUT)
    shutil.copytree(STAGE / "_build" / "html", OUT)
    print("chapters executed: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    print(f"site built in {time.monotonic() - start:.0f} s: {OUT / 'index.html'}")
    return OUT


def page_url(source: str) -> str:
    """The URL path of a repository file's page (Sphinx names pages after their files)."""
    return "/" + str(Path(source).with_suffix(".html").as_posix())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="chapters executed at once")
    args = parser.parse_args(argv)
    build(args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
