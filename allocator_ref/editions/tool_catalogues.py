"""Keep the tools' catalogues (``allocator_ref/locale/zh_CN/<domain>.po``) in step with the code.

Reads the package's source with :mod:`ast` (nothing is imported or run): in each module, a name bound
at module level by ``NAME = translator("domain")`` marks ``NAME("literal", ...)`` calls as
sentences of that domain.  The chapters' display helpers (``chapters/_course.py``, outside the package
but printing in every chapter) are read too, when the checkout has them.  ``update()`` adds new sentences as untranslated entries (with the file and
line they come from), keeps every translation whose English is unchanged, and marks sentences the
code no longer says obsolete (their Chinese stays in the file for a translator to reuse).
``problems()`` lists what would make a Chinese reader meet English: an untranslated sentence, a
translation whose ``{fields}`` differ from the English, and a call the catalogue can never match
(an f-string or a variable instead of a literal).
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import polib

from .messages import DOMAINS, catalogue_path, fields_of, formats_of, in_step, translator

# A catalogue's gaps are read by its translator (`editions check`), in their language; a call the catalogue
# can never match is the programmer's slip and stays English, like the code it names.
tr = translator("doctor")

PACKAGE = Path(__file__).resolve().parent.parent
# Files outside the package whose tr("...") sentences live in the same catalogues.
COURSE_FILES = (PACKAGE.parent / "chapters" / "_course.py",)
# The command line's --help: argparse's help=/description= sentences of these files go into the doctor's
# catalogue (editions/cli_words.py says them at --help time), like xgettext's keyword list.
CLI_FILES = ("__main__.py", "predict/cli.py", "editions/__main__.py", "editions/cli_words.py", "labs/gradebook.py",
             "labs/verify.py", "labs/grading.py", "labs/generate.py")
HELP_CALLS = {"add_argument", "add_parser", "ArgumentParser", "CourseParser", "add_argument_group"}
HELP_KEYWORDS = {"help", "description"}


def _translator_names(tree: ast.Module) -> dict:
    """{'tr': 'doctor'} for each module-level ``tr = translator("doctor")``."""
    names = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", getattr(node.value.func, "attr", None)) == "translator"
                and node.value.args and isinstance(node.value.args[0], ast.Constant)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node.value.args[0].value
    return names


def _constants(tree: ast.Module) -> dict:
    """Module-level ``NAME = "text"`` (or a concatenation of such), for help=NAME."""
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _text(node.value, consts)
            if value is not None:
                consts[node.targets[0].id] = value
    return consts


def _text(node, consts: dict):
    """The string a literal, a module constant, a ``+`` of them or the docstring's first line
    (``__doc__.split("\\n")[0]``, a command's description) spells; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)          # __doc__.split("\n")[0]
            and getattr(node.value.func, "attr", None) == "split"
            and getattr(node.value.func.value, "id", None) == "__doc__"
            and [getattr(a, "value", None) for a in node.value.args] == ["\n"]
            and getattr(node.slice, "value", None) == 0 and "__doc__" in consts):
        return consts["__doc__"].split("\n")[0]
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, consts), _text(node.right, consts)
        return None if left is None or right is None else left + right
    return None


def _help_sentences(tree: ast.Module, where: str, found: dict, problems: list) -> None:
    consts = _constants(tree)
    if ast.get_docstring(tree, clean=False) is not None:
        consts["__doc__"] = ast.get_docstring(tree, clean=False)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", getattr(node.func, "id", None))
        if name not in HELP_CALLS:
            continue
        for keyword in node.keywords:
            if keyword.arg not in HELP_KEYWORDS:
                continue
            if isinstance(keyword.value, ast.Attribute):      # argparse.SUPPRESS
                continue
            text = _text(keyword.value, consts)
            if text is None:
                problems.append(f"{where}:{node.lineno}: {keyword.arg}= needs a literal English sentence (or a "
                                f"module constant) for --help to find its Chinese")
            else:
                found["doctor"][text].append(f"{where}:{node.lineno}")


# The chapters' code cells print through ``course.say("...")`` / ``course.words("...")`` (chapters/_course.py):
# their sentences are the "course" catalogue's.
CHAPTERS = PACKAGE.parent / "chapters"
COURSE_CALLS = {"say": (0,), "words": (0,), "chart_words": (0,), "result_words": (1, 2),    # which arguments are sentences
                "real_gpu": (0, 1), "term": (0,)}


# A chapter's claim checks (tests/claims/<chapter>.py, run in its kernel by the tests) say their result
# words through ``course.result_words`` too: the Chinese run computes the Chinese the prose states.
CLAIM_CHECKS = PACKAGE.parent / "tests" / "claims"


def _chapter_code(path: Path) -> list:
    """The code a chapter's kernel runs: its code cells, then its claim checks' file (when there is one)."""
    import jupytext
    code = [cell.source for cell in jupytext.read(path).cells if cell.cell_type == "code"]
    checks = CLAIM_CHECKS / (path.stem + ".py")
    return code + ([checks.read_text(encoding="utf-8")] if checks.exists() else [])


def _chapter_sentences(found: dict, problems: list) -> None:
    for path in sorted(CHAPTERS.glob("[0-9][0-9]_*.md")):
        where = path.relative_to(PACKAGE.parent).as_posix()
        for code in _chapter_code(path):
            # a magic or shell line is not Python: blank it, keeping the line numbers
            source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                               for line in code.splitlines())
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in COURSE_CALLS and getattr(node.func.value, "id", "") == "course"):
                    for index in COURSE_CALLS[node.func.attr]:
                        arg = node.args[index] if len(node.args) > index else None
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            found["course"][arg.value].append(where)
                        elif node.func.attr not in ("result_words", "real_gpu"):   # may be a number or f-string
                            problems.append(f"{where}: course.{node.func.attr}() needs a literal English sentence "
                                            f"(line {node.lineno} of a cell); pass the changing parts as named fields")


def scan(package: Path = PACKAGE) -> tuple[dict, list]:
    """({domain: {sentence: ['file:line', ...]}}, [problem, ...]) for the whole package
    (and, for the course's own package, the chapters' helpers: ``COURSE_FILES``)."""
    found, problems = {d: defaultdict(list) for d in DOMAINS}, []
    extra = [p for p in COURSE_FILES if p.exists()] if package == PACKAGE else []
    for path in sorted(package.rglob("*.py")) + extra:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(package.parent).as_posix()
        if package == PACKAGE and path.is_relative_to(package) and path.relative_to(package).as_posix() in CLI_FILES:
            _help_sentences(tree, where, found, problems)
        names = _translator_names(tree)
        if not names:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                domain = names[node.func.id]
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.setdefault(domain, defaultdict(list))[first.value].append(f"{where}:{node.lineno}")
                else:
                    problems.append(f"{where}:{node.lineno}: {node.func.id}() needs a literal English "
                                    f"sentence (an f-string or a variable can never match the catalogue); "
                                    f"pass the changing parts as named fields")
    if package == PACKAGE and CHAPTERS.is_dir():
        _chapter_sentences(found, problems)
    if package == PACKAGE:
        _cost_notes(found)
    return found, problems


# The cost model's notes (device/profiles/costs.json "source"), which chapter 0 prints through
# CostModel.source_words: data said in the reader's language, so they are the doctor's sentences too.
COST_NOTES = PACKAGE / "device" / "profiles" / "costs.json"


def _cost_notes(found: dict) -> None:
    import json
    for key, entry in json.loads(COST_NOTES.read_text(encoding="utf-8")).items():
        if not key.startswith("_") and isinstance(entry, dict) and entry.get("source"):
            found["doctor"][entry["source"]].append(f"{COST_NOTES.relative_to(PACKAGE.parent).as_posix()}:{key}")


def _load(domain: str) -> polib.POFile:
    path = catalogue_path(domain)
    if path.exists():
        return polib.pofile(str(path), encoding="utf-8", wrapwidth=0)
    po = polib.POFile(wrapwidth=0)
    po.metadata = {"Project-Id-Version": f"allocator_ref {domain}", "Language": "zh_CN",
                   "MIME-Version": "1.0", "Content-Type": "text/plain; charset=UTF-8",
                   "Content-Transfer-Encoding": "8bit"}
    return po


def update(package: Path = PACKAGE) -> dict:
    """Refresh every domain's catalogue from the code; {domain: (new, obsolete, untranslated)}."""
    found, _ = scan(package)
    counts = {}
    for domain in DOMAINS:
        po, sentences = _load(domain), found.get(domain, {})
        known = {e.msgid: e for e in po}
        new = 0
        for sentence, places in sentences.items():
            entry = known.get(sentence)
            if entry is None:
                entry = polib.POEntry(msgid=sentence, msgstr="")
                po.append(entry)
                new += 1
            entry.obsolete = False
            # The files a sentence comes from, without line numbers: an edit elsewhere in a file must not
            # rewrite every catalogue entry below it (``make translations`` would touch an unrelated .po).
            entry.occurrences = [(name, "") for name in sorted({p.rsplit(":", 1)[0] for p in places})]
        gone = 0
        for entry in po:
            if entry.msgid not in sentences and not entry.obsolete:
                entry.obsolete, gone = True, gone + 1
        catalogue_path(domain).parent.mkdir(parents=True, exist_ok=True)
        po.save(str(catalogue_path(domain)))
        counts[domain] = (new, gone, sum(1 for e in po if not e.obsolete and not _translated(e)))
    return counts


def _translated(entry: polib.POEntry) -> bool:
    return bool(entry.msgstr) and "fuzzy" not in entry.flags


def problems(package: Path = PACKAGE) -> list:
    """Every reason a Chinese reader of the tools would meet English or a broken sentence."""
    found, out = scan(package)
    for domain in DOMAINS:
        path = catalogue_path(domain)
        po = _load(domain)
        entries = {e.msgid: e for e in po if not e.obsolete}
        for sentence, places in found.get(domain, {}).items():
            entry = entries.get(sentence)
            short = sentence if len(sentence) < 70 else sentence[:67] + "..."
            if entry is None or not _translated(entry):
                out.append(tr("{catalogue}: no Chinese for {sentence} ({place}); run `python -m "
                              "allocator_ref.editions update` and translate it", catalogue=path.name,
                              sentence=repr(short), place=places[0]))
            elif fields_of(entry.msgstr) != fields_of(sentence):
                out.append(tr("{catalogue}: the Chinese of {sentence} has fields {chinese}, the English {in_english} "
                              "({place})", catalogue=path.name, sentence=repr(short),
                              chinese=sorted(fields_of(entry.msgstr)), in_english=sorted(fields_of(sentence)),
                              place=places[0]))
            elif not in_step(sentence, entry.msgstr):
                out.append(tr("{catalogue}: the Chinese of {sentence} gives its fields other format specs or "
                              "conversions ({chinese}) than the English ({in_english}); write each field as the "
                              "English does ({place})", catalogue=path.name, sentence=repr(short),
                              chinese=formats_of(entry.msgstr), in_english=formats_of(sentence), place=places[0]))
    return out
