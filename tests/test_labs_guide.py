"""labs/README.md, the instructor guide, is itself tested: its tables match the labs, the README's
FAQ rows point at sections that exist, and its steps work when followed on a scratch copy of the
course (add an exercise on a decision no lab plugged, add a lab, export it for grading), using only
the make targets the guide names.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from allocator_ref.labs import generate
from allocator_ref.labs.check import EXERCISES, _load_all

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "labs" / "README.md"


def test_the_guide_table_names_every_exercise_and_the_list_every_student_copy():
    _load_all()
    text = GUIDE.read_text()
    table = "\n".join(line for line in text.splitlines() if line.startswith("| "))
    named = set(re.findall(r"`(lab\d+\.\w+)`", table))
    assert named == set(EXERCISES), (f"add to the guide's lab table: {sorted(set(EXERCISES) - named)}; "
                                     f"remove: {sorted(named - set(EXERCISES))}")
    listed = text[text.index("Student copies:"):text.index("Student copies:") + 600]
    for path in generate.STUDENT_DIR.glob("*.ipynb"):
        assert path.name in listed, f"add {path.name} to the guide's student-copy list"


def _headings(chapter: Path) -> list:
    md = chapter.with_suffix(".md")
    return [line.lstrip("#").strip() for line in md.read_text().splitlines() if line.startswith("#")]


def _plain(text: str) -> str:
    """A section name without its quoting: `'e'` in a heading, 'e' in the README."""
    return re.sub(r"[`'\"]", "", text)


def test_every_faq_row_points_at_a_section_that_exists():
    readme = (ROOT / "README.md").read_text()
    rows = [line for line in readme.splitlines() if re.match(r"\| Q\d+", line)]
    assert rows, "the README's FAQ table is gone"
    for row in rows:
        links = re.findall(r"\]\((chapters/[^)]+\.ipynb)\)", row)
        names = re.findall(r'"([^"]+)"', row.split("|")[2])
        assert links and names, f"FAQ row without a chapter link and a quoted section: {row[:80]}"
        headings = [_plain(h) for h in _headings(ROOT / links[0])]
        for name in names:
            stem = _plain(name.rstrip("…").rstrip(".").strip())
            assert any(stem in h for h in headings), (
                f"README FAQ row {row.split('|')[1].strip()[:40]!r}: no section {name!r} in {links[0]}")


# ------------------------------------------------------------------ the guide, followed on a scratch copy
NEW_DECISION = '''

# ------------------------------------------------------------------ get_free_block (a new decision)
def _gfb_ops(rng=None):
    big = 100 * MiB if rng is None else rng.randint(70, 200) * MiB
    return [("malloc", "a", big, 0), ("free", "a"), ("malloc", "b", 2 * MiB, 0), ("malloc", "c", big, 0),
            ("free", "b"), ("free", "c")]


def _gfb_case(label, ops, config):
    def judge(fn):
        compare(ops, None, config=config, what="your get_free_block", plug={"get_free_block": fn})
    return Case(label, judge, data=(ops, config))


register(Exercise(
    id="lab2.get_free_block", lab=2, title="get_free_block(allocator, p): may a cached block serve the request?",
    public=lambda: [_gfb_case("an oversize cached block and a small request", _gfb_ops(), "max_split_size_mb:64")],
    hidden=lambda rng: [_gfb_case("seeded sizes, max_split_size set", _gfb_ops(rng),
                                  f"max_split_size_mb:{rng.choice([40, 64])}")],
    nudge="Which cached blocks may a request below max_split_size take?",
    hint="Best fit in p.pool for (p.stream_key, p.size); refuse an oversize block for a normal request, "
         "and for an oversize request a block max_non_split_rounding_size or more bigger.",
))
from .spec import Edge, edges
edges("lab2.get_free_block", Edge("max_split_size set: an oversize cached block", lambda d: "max_split" in d[1]))
'''

NEW_CELLS = '''
## Exercise: get_free_block

```{code-cell} ipython3
# exercise: lab2.get_free_block
def get_free_block(allocator, p):
    """Take the cached block that serves p, or return False."""
    ### BEGIN SOLUTION
    block = p.pool.best_fit(p.stream_key, p.size)
    if block is None or block.stream_key != p.stream_key:
        return False
    max_split = allocator.config.max_split_size
    if p.size < max_split and block.size >= max_split:
        return False
    if p.size >= max_split and block.size >= p.size + allocator.config.max_non_split_rounding_size:
        return False
    p.pool.remove(block)
    p.block = block
    return True
    ### END SOLUTION
```

```{code-cell} ipython3
check("lab2.get_free_block", get_free_block);
```
'''

WRONG_GFB = '''"""Forgets the max_split_size rules: an oversize cached block serves a small request."""
EXERCISE = "lab2.get_free_block"
EXPECTED_REASON = "after op 2"


def SUBMISSION(allocator, p):
    block = p.pool.best_fit(p.stream_key, p.size)
    if block is None or block.stream_key != p.stream_key:
        return False
    p.pool.remove(block)
    p.block = block
    return True
'''

LAB10 = '''"""Lab 10 -- a lab added by following labs/README.md (one declaration per exercise)."""
from .spec import Edge, edges, function_exercise

function_exercise(
    id="lab10.double", lab=10, title="double(n)", reference=lambda n: 2 * n,
    public=[(3,)], hidden=lambda rng: [(rng.randint(10, 10 ** 6),) for _ in range(3)],
    explain=lambda args, expected: f"twice {args[0]} is {expected}",
    nudge="Look at the number above.", hint="Return n * 2.", pure=True,
)
edges("lab10.double", Edge("a number of 10 or more", lambda data: data[0] >= 10))
'''

LAB10_SOURCE = '''---
jupytext:
  formats: ipynb,md:myst
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
    jupytext_version: 1.19.6
kernelspec:
  display_name: Python 3 (ipykernel)
  language: python
  name: python3
---

# Lab 10 — Double it

```{code-cell} ipython3
from allocator_ref.labs import check, hint, show_solution, progress
```

```{code-cell} ipython3
# exercise: lab10.double
def double(n):
    """Twice n."""
    ### BEGIN SOLUTION
    return n + n
    ### END SOLUTION
```

```{code-cell} ipython3
check("lab10.double", double);
```
'''

WRONG10 = '''"""Adds one too many."""
EXERCISE = "lab10.double"
EXPECTED_REASON = "returned"


def SUBMISSION(n):
    return n + n + 1
'''


def _scratch_copy(dst: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)          # keeps mtimes: make must not think pyproject changed
    (dst / ".venv").symlink_to((ROOT / ".venv").resolve())
    return dst


def _make(root: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root), ALLOCATOR_REF_DEVICE="sim", MPLBACKEND="Agg")
    env.pop("ALLOCATOR_REF_LAB_SEED", None)
    # -o: never rebuild the shared virtualenv from a scratch copy
    proc = subprocess.run(["make", "-s", "-o", ".venv/.installed", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1500)
    if ok:
        assert proc.returncode == 0, f"make {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _commit(root: Path, message: str) -> None:
    """The scratch copy as an instructor's checkout: a git repository with the work committed."""
    who = {"GIT_AUTHOR_NAME": "guide", "GIT_AUTHOR_EMAIL": "guide@localhost",
           "GIT_COMMITTER_NAME": "guide", "GIT_COMMITTER_EMAIL": "guide@localhost"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", message]):
        subprocess.run(["git", *args], cwd=root, env=dict(os.environ, **who), check=True, capture_output=True)


def _translate_new_blocks(root: Path) -> None:
    """The guide's "Regenerate and check" step for the Chinese edition: `make translations` (it exits 1 while
    a block is untranslated), then each new block's Chinese in its catalogue (locale/zh_CN/labs/source/*.po);
    here a stand-in that keeps what the translation rules ask to keep (inline code, fences, markers, URLs)."""
    import re
    from allocator_ref.editions import catalog
    _make(root, "translations", ok=False)
    for path in (root / "locale" / "zh_CN" / "labs" / "source").glob("*.po"):
        po = catalog.load(path)
        todo = [e for e in po if not e.obsolete and not catalog.is_translated(e)]
        for entry in todo:
            english = entry.msgid
            head = re.match(r"#+ ", english)
            keep = ([m.group(0) for m in catalog.INLINE_CODE.finditer(catalog._strip_fences(english))]
                    + catalog._fenced(english) + catalog.MARKER.findall(english) + catalog.URL.findall(english))
            entry.msgstr = (head.group(0) if head else "") + "（译文）" + " ".join(keep)
            if "fuzzy" in entry.flags:
                entry.flags.remove("fuzzy")
        if todo:
            catalog.write(po, path)


def _name_in_guide_list(guide: Path, kind: str, after, name: str) -> None:
    """Add `name` to the guide's "(kind: ...)" prose list, after `after` (else at its end)."""
    text = guide.read_text()
    start = text.index(f"({kind}:")
    end = text.index(")", start)
    listed = text[start:end]
    listed = listed.replace(after, f"{after}, {name}", 1) if after else f"{listed}, {name}"
    guide.write_text(text[:start] + listed + text[end:])


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(), reason="the guide's make targets need .venv")
def test_following_the_guide_on_a_scratch_copy(tmp_path):
    root = _scratch_copy(tmp_path / "course")

    # "Add an exercise on a decision the labs do not plug yet" + "Change a lab": lab 2 gets get_free_block.
    lab2 = root / "allocator_ref" / "labs" / "lab2.py"
    lab2.write_text(lab2.read_text() + NEW_DECISION)
    source2 = root / "labs" / "source" / "lab02_build_the_core.md"
    source2.write_text(source2.read_text() + NEW_CELLS)
    _translate_new_blocks(root)
    _make(root, "student")
    missing = _make(root, "check-labs", "LAB=2", ok=False)
    assert missing.returncode != 0 and "lab2.get_free_block: no known-wrong answer: add labs/wrong/lab2_" in missing.stdout
    assert "lab2.get_free_block: marked neither pure nor observed" in missing.stdout   # step 2 left out
    (root / "labs" / "wrong" / "lab2_get_free_block_ignores_max_split.py").write_text(WRONG_GFB)
    guide = root / "labs" / "README.md"            # the guide's table names the new exercise
    guide.write_text(guide.read_text().replace("`lab2.merge`", "`lab2.merge`, `lab2.get_free_block`", 1))
    # step 2: it hands the learner's function live objects (compare plugs it in): observed, and so named
    lab2.write_text(lab2.read_text().replace('id="lab2.get_free_block", lab=2,', 'id="lab2.get_free_block", observed=True, lab=2,'))
    _name_in_guide_list(guide, "observed", "lab2.merge", "get_free_block")
    _make(root, "check-labs", "LAB=2")
    student2 = (root / "labs" / "student" / "lab02_build_the_core.ipynb").read_text()
    assert "def get_free_block(allocator, p)" in student2 and "p.pool.remove(block)" not in student2
    assert "p.pool.remove(block)" in (root / "labs" / "source" / "lab02_build_the_core.ipynb").read_text()

    # "Add a lab": lab 10 (9 labs exist), found by its file name.
    (root / "allocator_ref" / "labs" / "lab10.py").write_text(LAB10)
    (root / "labs" / "source" / "lab10_double_it.md").write_text(LAB10_SOURCE)
    (root / "labs" / "wrong" / "lab10_off_by_one.py").write_text(WRONG10)
    row9 = next(line for line in guide.read_text().splitlines() if line.startswith("| 9 "))
    guide.write_text(guide.read_text().replace(row9, row9 + "\n| 10 Double it | `lab10.double` | twice n |", 1))
    _translate_new_blocks(root)
    _make(root, "student")
    _name_in_guide_list(guide, "pure", None, "lab10.double")         # function_exercise(..., pure=True)
    guide.write_text(guide.read_text().replace("`lab09_casebook.ipynb`.",            # step 4: its student copy
                                               "`lab09_casebook.ipynb`, `lab10_double_it.ipynb`.", 1))
    _make(root, "check-labs", "LAB=10")
    assert (root / "labs" / "student" / "lab10_double_it.ipynb").exists()
    assert (root / "labs" / "source" / "lab10_double_it.ipynb").exists()
    gen = subprocess.run([str(root / ".venv" / "bin" / "python"), "-m", "allocator_ref.labs.generate", "--check"],
                         cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True)
    assert gen.returncode == 0, gen.stdout

    # "Grading with nbgrader": the new lab exported for grading, without its solution.  Commit first (the
    # guide's "Which files to change"): make nbgrader publishes the course as committed (workshop/room_copy.py).
    _commit(root, "Lab 10 and lab 2's get_free_block, as the guide adds them")
    _make(root, "nbgrader", "LAB=10", f"NBGRADER_DIR={tmp_path / 'graded'}")
    released = (tmp_path / "graded" / "release" / "lab10" / "lab10_double_it.ipynb").read_text()
    assert "return n + n" not in released and "assert check('lab10.double', double, seed=" in released
    usage = _make(root, "nbgrader", ok=False)
    assert usage.returncode != 0 and "usage: make nbgrader LAB=02" in usage.stdout + usage.stderr
