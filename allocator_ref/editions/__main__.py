"""``python -m allocator_ref.editions update|build|check [SOURCE ...]`` (``make translations``).

update   make or refresh each catalogue from its English source (extract is the same command)
build    write the Chinese notebooks from the English sources and the catalogues, then say what is left
check    write nothing; per source, how much is translated; exit 1 when anything is out of step
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from allocator_ref.editions import catalog
from allocator_ref.editions.messages import translator

# Every line these commands print is the doctor's catalogue's: translators and Chinese learners run
# `make translations` and `make student` (README.zh-CN.md), so their results and refusals speak Chinese.
tr = translator("doctor")


def _sources(names: list) -> list:
    if not names:
        return catalog.sources()
    chosen, known = [], {p.resolve() for p in catalog.sources()}
    for name in names:
        path = Path(name).resolve()
        if path not in known:
            raise SystemExit(tr("{name}: not an English chapter or lab source; give chapters/NN_name.md or "
                                "labs/source/labNN_name.md (or nothing, for all of them)", name=name))
        chosen.append(path)
    return chosen


def cmd_update(args) -> int:
    for source in _sources(args.sources):
        po, counts = catalog.update(source)
        path = catalog.catalogue_path(source)
        catalog.write(po, path)
        left = len(catalog.untranslated(source))
        print(tr("{path}: {kept} kept, {new} new, {fuzzy} fuzzy, {obsolete} obsolete; {left} untranslated",
                 path=path.relative_to(catalog.ROOT), left=left, **counts))
    if not args.sources:                          # the tools' sentences (check(), the doctor)
        from allocator_ref.editions import tool_catalogues
        for domain, (new, gone, left) in tool_catalogues.update().items():
            print(tr("{path}: {new} new, {obsolete} obsolete; {left} untranslated",
                     path=f"allocator_ref/locale/zh_CN/{domain}.po", new=new, obsolete=gone, left=left))
    return 0


def cmd_build(args) -> int:
    from allocator_ref.editions import build
    for path in build.write_all():
        where = path.relative_to(catalog.ROOT)
        print(tr("wrote {path}", path=where) if path.exists() else tr("removed {path}", path=where))
    # What is left to translate, and exit 1 when anything is: `make student` and `make translations`
    # then fail on an English paragraph whose Chinese was not refreshed, as the tests do.
    return cmd_status(args, quiet=True)


def cmd_status(args, quiet: bool = False) -> int:
    """Per source, how many blocks are translated; then every in-step problem.  Exit 1 on any."""
    from allocator_ref.editions import instep
    for source in catalog.sources():
        if catalog.catalogue_path(source).exists():
            blocks = catalog.english_blocks(source)
            left = len(catalog.untranslated(source))
            if left or not quiet:
                print(tr("{path}: {done}/{total} blocks translated", path=source.relative_to(catalog.ROOT),
                         done=len(blocks) - left, total=len(blocks)))
    found = instep.problems()
    for problem in found[:60] if quiet else found:
        print(problem)
    if quiet and len(found) > 60:
        print(tr("... and {n} more (python -m allocator_ref.editions check)", n=len(found) - 60))
    if not found:
        print(tr("the English and Chinese editions are in step"))
    return 1 if found else 0


def main(argv=None) -> int:
    from .cli_words import CourseParser, add_language_option, help_language, parse_in_language
    from .language import speaking
    parser = CourseParser(prog="python -m allocator_ref.editions", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("extract", "update"):
        p = sub.add_parser(name, help="make or refresh catalogues from the English sources")
        p.add_argument("sources", nargs="*", help="English .md sources (default: every chapter and lab)")
        p.set_defaults(func=cmd_update)
    sub.add_parser("build", help="write the Chinese notebooks").set_defaults(func=cmd_build)
    sub.add_parser("check", help="write nothing; exit 1 when an edition is out of step").set_defaults(func=cmd_status)
    add_language_option(parser)
    for command in sub.choices.values():                # `editions check --lang zh` as well as `editions --lang zh check`
        add_language_option(command, default=argparse.SUPPRESS)
    args = parse_in_language(parser, argv)              # --help in the reader's language
    with speaking(help_language(argv)):                 # and the command's results and refusals
        return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
