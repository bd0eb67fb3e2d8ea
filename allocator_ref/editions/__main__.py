"""``python -m allocator_ref.editions update|build|check [SOURCE ...]`` (``make translations``).

update   make or refresh each catalogue from its English source (extract is the same command)
build    write the Chinese notebooks from the English sources and the catalogues
check    write nothing; exit 1 when a catalogue or a Chinese notebook is out of step
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from allocator_ref.editions import catalog


def _sources(names: list) -> list:
    if not names:
        return catalog.sources()
    chosen = []
    for name in names:
        path = Path(name).resolve()
        if path.suffix != ".md" or not path.is_file():
            raise SystemExit(f"{name}: not an English source; give chapters/NN_name.md or labs/source/labNN_name.md")
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
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m allocator_ref.editions", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("extract", "update"):
        p = sub.add_parser(name, help="make or refresh catalogues from the English sources")
        p.add_argument("sources", nargs="*", help="English .md sources (default: every chapter and lab)")
        p.set_defaults(func=cmd_update)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
