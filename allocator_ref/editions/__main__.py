"""``python -m allocator_ref.editions update|build|check [SOURCE ...]`` (``make translations``).

update   make or refresh each catalogue from its English source (extract is the same command)
build    write the Chinese notebooks from the English sources and the catalogues, then say what is left
check    write nothing; per source, how much is translated; exit 1 when anything is out of step
"""
from __future__ import annotations

import sys
from pathlib import Path

from allocator_ref.editions import catalog


def _sources(names: list) -> list:
    if not names:
        return catalog.sources()
    chosen, known = [], {p.resolve() for p in catalog.sources()}
    for name in names:
        path = Path(name).resolve()
        if path not in known:
            raise SystemExit(f"{name}: not an English chapter or lab source; give chapters/NN_name.md or "
                             f"labs/source/labNN_name.md (or nothing, for all of them)")
        chosen.append(path)
    return chosen


def cmd_update(args) -> int:
    for source in _sources(args.sources):
        po, counts = catalog.update(source)
        path = catalog.catalogue_path(source)
        catalog.write(po, path)
        left = len(catalog.untranslated(source))
        print(f"{path.relative_to(catalog.ROOT)}: {counts['kept']} kept, {counts['new']} new, "
              f"{counts['fuzzy']} fuzzy, {counts['obsolete']} obsolete; {left} untranslated")
    if not args.sources:                          # the tools' sentences (check(), the doctor)
        from allocator_ref.editions import tool_catalogues
        for domain, (new, gone, left) in tool_catalogues.update().items():
            print(f"allocator_ref/locale/zh_CN/{domain}.po: {new} new, {gone} obsolete; {left} untranslated")
    return 0


def cmd_build(args) -> int:
    from allocator_ref.editions import build
    for path in build.write_all():
        print(f"{'wrote' if path.exists() else 'removed'} {path.relative_to(catalog.ROOT)}")
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
                print(f"{source.relative_to(catalog.ROOT)}: {len(blocks) - left}/{len(blocks)} blocks translated")
    found = instep.problems()
    for problem in found[:60] if quiet else found:
        print(problem)
    if quiet and len(found) > 60:
        print(f"... and {len(found) - 60} more (python -m allocator_ref.editions check)")
    if not found:
        print("the English and Chinese editions are in step")
    return 1 if found else 0


def main(argv=None) -> int:
    from .cli_words import CourseParser, add_language_option, parse_in_language   # --help in the reader's language
    parser = CourseParser(prog="python -m allocator_ref.editions", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("extract", "update"):
        p = sub.add_parser(name, help="make or refresh catalogues from the English sources")
        p.add_argument("sources", nargs="*", help="English .md sources (default: every chapter and lab)")
        p.set_defaults(func=cmd_update)
    sub.add_parser("build", help="write the Chinese notebooks").set_defaults(func=cmd_build)
    sub.add_parser("check", help="write nothing; exit 1 when an edition is out of step").set_defaults(func=cmd_status)
    add_language_option(parser)
    args = parse_in_language(parser, argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
