"""The Chinese edition stays in step with the English one (allocator_ref/editions; README.zh-CN.md).

* every English markdown block of every chapter and lab has a translation in its catalogue
  (``locale/zh_CN/**.po``), keeping the FORMAT's rules (markers and claimed values, inline
  code, fenced code, links, URLs) and leaving no English sentence in the Chinese prose;
* the committed Chinese notebooks are exactly what ``make translations`` writes, and their code
  cells are the English notebooks' byte for byte;
* the claims the Chinese prose states are the English prose's, and (slow) hold when the Chinese
  notebook runs top to bottom on the simulated device, under both profiles, with and without the
  real traces -- the same checks ``test_chapter_claims.py`` makes of the English chapters;
* an English paragraph changed on a copy of the course makes the in-step check fail;
* the entry points: chapter 0 in each language links the other, README.zh-CN.md gives the same
  two commands, ``make lab`` opens the chosen language, the glossary's terms are the ones used.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from allocator_ref.editions import build, catalog, instep
from claim_checks import stated
from test_chapter_claims import computed_claims
from test_notebooks import PROFILE_PARAMS, PROFILES, REAL_TRACE_CHAPTERS, execute_notebook, run_ahead

ROOT = Path(__file__).resolve().parents[1]
SOURCES = catalog.sources()
TRANSLATED = build.translated_sources()
ZH_CHAPTERS = sorted((ROOT / "chapters" / "zh").glob("[0-9][0-9]_*.ipynb"))
ZH_STUDENT_LABS = sorted((ROOT / "labs" / "student" / "zh").glob("lab*.ipynb"))
NO_REAL_TRACES = (("ALLOCATOR_REF_TRACES", "none"),)


@pytest.fixture(scope="module", autouse=True)
def _chapters_ahead(request):
    """The Chinese chapter and lab runs this module's tests ask for, started a few at once
    (test_notebooks.run_ahead)."""
    yield from run_ahead(request, {
        "test_chinese_chapter_runs_all_and_its_claims_hold": lambda p: (p["path"], p["profile"], None, ()),
        "test_chinese_claims_hold_without_the_real_traces": lambda p: (p["path"], PROFILES[0], None,
                                                                       NO_REAL_TRACES),
        "test_chinese_student_lab_runs_all": lambda p: (p["path"], PROFILES[0], None, ())})


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _markdown(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


# ------------------------------------------------------------------ in step

@pytest.mark.parametrize("source", SOURCES, ids=_rel)
def test_every_english_block_is_translated_by_the_rules(source):
    problems = instep.catalogue_problems(source)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:20])


@pytest.mark.parametrize("source", TRANSLATED, ids=_rel)
def test_committed_chinese_notebooks_are_the_build_with_the_english_code(source):
    problems = instep.notebook_problems(source)
    assert not problems, "\n".join(problems)


def test_no_chinese_notebook_without_its_english_source():
    assert not instep.stray_notebooks(), instep.stray_notebooks()


def test_a_changed_english_paragraph_fails_the_in_step_check(tmp_path):
    """On a copy: edit one paragraph of chapter 3; the check names it; update keeps the old Chinese
    as a fuzzy hint (still failing); a translator's fix and a rebuild bring the editions back in step."""
    for rel in ("chapters", "locale"):
        shutil.copytree(ROOT / rel, tmp_path / rel, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    (tmp_path / "labs" / "source").mkdir(parents=True)
    for md in (ROOT / "labs" / "source").glob("lab*.md"):
        shutil.copy(md, tmp_path / "labs" / "source" / md.name)
    source = tmp_path / "chapters" / "03_streams.md"
    assert instep.problems(tmp_path, [source]) == []
    before = catalog.translations(catalog.load(catalog.catalogue_path(source, tmp_path)))
    obsolete_before = sum(1 for e in catalog.load(catalog.catalogue_path(source, tmp_path)) if e.obsolete)

    old = next(b for b in catalog.english_blocks(source)                 # a plain paragraph of prose
               if len(b.split()) > 20 and "<!--" not in b and not b.startswith(("#", "-", "|", "[", "*", "1.")))
    edited = old.replace(" ", " really ", 1)
    text = source.read_text(encoding="utf-8")
    assert old in text
    source.write_text(text.replace(old, edited), encoding="utf-8")
    found = instep.problems(tmp_path, [source])
    assert any("untranslated" in p and edited[:40] in p for p in found), found
    assert any("differs from what `make translations` writes" in p for p in found), found

    po, counts = catalog.update(source, tmp_path)
    catalog.write(po, catalog.catalogue_path(source, tmp_path))
    assert counts["fuzzy"] == 1 and counts["obsolete"] == obsolete_before + 1, counts    # the old English kept
    entry = po.find(edited)
    assert entry.fuzzy and entry.previous_msgid == old
    assert entry.msgstr == before[old]                  # the old Chinese, shown to the translator
    assert any("fuzzy" in p for p in instep.problems(tmp_path, [source]))

    entry.flags.remove("fuzzy")
    catalog.write(po, catalog.catalogue_path(source, tmp_path))
    build.write_all(tmp_path)
    assert instep.problems(tmp_path, [source]) == []


def test_the_command_line_refuses_a_file_that_is_not_a_source():
    import sys
    out = subprocess.run([sys.executable, "-m", "allocator_ref.editions", "update", "README.md"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode != 0 and "not an English chapter or lab source" in out.stderr, out
    assert not (ROOT / "locale" / "zh_CN" / "README.po").exists()


def test_the_rules_catch_what_a_translator_can_break():
    english = "Peak is **64.00 MiB** with `record_stream`, see [lab](../labs/x.ipynb)."
    claimed = ["64.00 MiB"]                              # the cell's claims metadata names it
    assert catalog.rule_problems(english, "峰值为 **64.00 MiB**，见 `record_stream` 与 [实验](../labs/x.ipynb)。",
                                 claimed) == []
    broken = catalog.rule_problems(english, "峰值为 **64 MiB**，record_stream，见 [实验](x.ipynb)。", claimed)
    assert len(broken) == 3, broken                      # the claimed value, the code, the link target
    assert len(catalog.rule_problems(english, "峰值为 64.00 MiB，见 `record_stream` 与 [实验](../labs/x.ipynb)。",
                                     claimed)) == 1      # a claimed value must stay bold: the test finds it so
    assert catalog.english_runs("这是 `a b c d e` 和 [a long English title](x)。") == []
    assert catalog.english_runs("这一段 was left in English by mistake。")
    assert catalog.split_blocks("a\nb\n\n```\nx\n\ny\n```\n\nc  ") == ["a\nb", "```\nx\n\ny\n```", "c"]


# ------------------------------------------------------------------ claims, statically and run

@pytest.mark.parametrize("path", ZH_CHAPTERS, ids=lambda p: p.name)
def test_chinese_prose_states_the_english_claims(path):
    """The same claims, each value as the English states it or as its Chinese in the course catalogue
    (``course.result_words``/``course.words`` say that Chinese in the Chinese run, where the slow test
    below compares it with the computed value)."""
    from allocator_ref.editions.language import speaking
    from allocator_ref.editions.messages import say
    import jupytext
    english = stated(jupytext.read(ROOT / "chapters" / path.with_suffix(".md").name))
    with speaking("zh"):
        in_chinese = {name: say("course", value) for name, value in english.items()}
    assert stated(nbformat.read(path, as_version=4)) == in_chinese


def _has_claims(path: Path) -> bool:
    return any(c.cell_type == "markdown" and c.metadata.get("claims") for c in nbformat.read(path, as_version=4).cells)


ZH_WITH_CLAIMS = [p for p in ZH_CHAPTERS if _has_claims(p)]


def _claims_hold(path: Path, run) -> None:
    prose = stated(nbformat.read(path, as_version=4))
    computed = computed_claims(run)
    missing = sorted(set(prose) - set(computed))
    assert not missing, f"zh/{path.name}: the prose states {missing} but no claim check computes them"
    wrong = {k: (prose[k], computed[k]) for k in prose if computed[k] is not None and prose[k] != computed[k]}
    assert not wrong, f"zh/{path.name}: the prose and the code disagree (name: (prose, code)): {wrong}"


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILE_PARAMS)
@pytest.mark.parametrize("path", ZH_CHAPTERS, ids=lambda p: p.name)
def test_chinese_chapter_runs_all_and_its_claims_hold(path, profile):
    """A Chinese learner's Run All on the simulated device; every number its prose states holds."""
    try:
        run, _ = execute_notebook(path, profile)
    except Exception as exc:
        pytest.fail(f"zh/{path.name} failed under profile {profile}:\n{exc}", pytrace=False)
    _claims_hold(path, run)


ZH_REAL_TRACE = [p for p in ZH_WITH_CLAIMS if any(p.name == e.name for e in REAL_TRACE_CHAPTERS)]


@pytest.mark.slow
@pytest.mark.parametrize("path", ZH_REAL_TRACE, ids=lambda p: p.name)
def test_chinese_claims_hold_without_the_real_traces(path):
    run, _ = execute_notebook(path, extra_env=NO_REAL_TRACES)
    _claims_hold(path, run)


@pytest.mark.slow
@pytest.mark.parametrize("path", ZH_STUDENT_LABS, ids=lambda p: p.name)
def test_chinese_student_lab_runs_all(path):
    try:
        execute_notebook(path, PROFILES[0])
    except Exception as exc:
        pytest.fail(f"labs/student/zh/{path.name} failed:\n{exc}", pytrace=False)


# ------------------------------------------------------------------ what a Chinese learner reads

@pytest.mark.parametrize("path", ZH_CHAPTERS, ids=lambda p: p.name)
def test_chinese_chapter_conventions(path):
    nb = nbformat.read(path, as_version=4)
    head = "\n".join(c.source for c in nb.cells[:4] if c.cell_type == "markdown")
    markdown = _markdown(path)
    assert "学习目标" in head, f"zh/{path.name}: 学习目标 at the top"
    assert re.search(r"^#+ .*小结", markdown, re.M), f"zh/{path.name}: a 小结 (recap) section"
    assert re.search(r"^#+ .*动手试试", markdown, re.M), f"zh/{path.name}: a 动手试试 (try it) section"
    wanted = r"\d\d" if path.name.startswith("00") else path.name[:2]
    assert re.search(rf"\]\(\.\./\.\./labs/student/zh/lab{wanted}_\w+\.ipynb\)", markdown), (
        f"zh/{path.name}: link the Chinese lab (labs/student/zh/lab{wanted}_*.ipynb)")


def _relative_links(path: Path) -> list:
    targets = re.findall(r"\]\(([^)\s]+)\)", _markdown(path))
    return [t.partition("#")[0] for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t)]


@pytest.mark.parametrize("path", [*ZH_CHAPTERS, *ZH_STUDENT_LABS], ids=lambda p: _rel(p))
def test_links_in_chinese_notebooks_resolve(path):
    """Every relative link lands on a file; a Chinese twin still to come counts only while its
    catalogue is missing (test_every_english_block_is_translated_by_the_rules fails on that)."""
    broken = []
    for target in _relative_links(path):
        resolved = (path.parent / target).resolve()
        if resolved.exists():
            continue
        english = resolved.parent.parent / resolved.name
        source = english.with_suffix(".md") if english.parent.name != "student" else \
            english.parent.parent / "source" / (english.stem + ".md")
        if resolved.parent.name == build.LANG_DIR and source.exists() and not catalog.catalogue_path(source).exists():
            continue
        broken.append(target)
    assert not broken, f"{_rel(path)} links to missing files: {broken}"


def test_chapter_0_links_the_other_edition():
    english = (ROOT / "chapters" / "00_setup_and_tour.md").read_text(encoding="utf-8")
    assert "](zh/00_setup_and_tour.ipynb)" in english
    chinese = ROOT / "chapters" / "zh" / "00_setup_and_tour.ipynb"
    assert "](../00_setup_and_tour.ipynb)" in _markdown(chinese)
    assert (chinese.parent / "../00_setup_and_tour.ipynb").resolve().exists()


def test_readme_zh_gives_the_same_two_commands():
    def commands(text: str) -> list:
        block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
        return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    english = commands((ROOT / "README.md").read_text(encoding="utf-8"))
    chinese_text = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    assert commands(chinese_text) == english == ["make lab", "make test"]
    for target in re.findall(r"\]\(([^)\s:]+)\)", chinese_text):
        assert (ROOT / target).exists(), f"README.zh-CN.md links to a missing file: {target}"
    assert catalog.english_runs(re.sub(r"```.*?```", "", chinese_text, flags=re.S), catalog.NAMES) == []


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("lang, first", [("zh", "chapters/zh/00_setup_and_tour.ipynb"),
                                         ("en", "chapters/00_setup_and_tour.ipynb")])
def test_make_lab_opens_chapter_0_in_the_chosen_language(lang, first):
    out = subprocess.run(["make", "-n", "lab", f"COURSE_LANG={lang}"], cwd=ROOT, capture_output=True, text=True)
    line = [ln for ln in out.stdout.splitlines() if "jupyter lab" in ln]
    assert line and line[-1].rstrip().endswith(" " + first), out.stdout[-600:]


def test_glossary_pairs_the_terms_the_editions_use():
    """Each Chinese term of the glossary appears in the Chinese text; each code name in the English
    chapters and labs or in the package's code (where a chapter shortens it, e.g. `…AllowOpportunistic`)."""
    rows = re.findall(r"^\| (?!中文术语|---)(.+?) \| (.+?) \| .+? \|$",
                      (ROOT / "chapters" / "zh" / "glossary.md").read_text(encoding="utf-8"), re.M)
    assert len(rows) >= 30
    chinese_text = "\n".join(catalog.load(catalog.catalogue_path(s)).__unicode__() for s in TRANSLATED)
    english_text = "\n".join(p.read_text(encoding="utf-8") for p in
                             [*SOURCES, *sorted((ROOT / "allocator_ref").rglob("*.py"))])
    unused = [t for zh, _ in rows for t in zh.split(" / ") if t not in chinese_text]
    unknown = [n for _, en in rows for n in re.findall(r"`([^`]+)`", en) if n not in english_text]
    assert not unused, f"glossary terms no Chinese chapter uses: {unused}"
    assert not unknown, f"glossary names the English course never mentions: {unknown}"
