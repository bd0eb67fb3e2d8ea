"""Keep each chapter's and lab source's .ipynb paired with its .md, never losing an edit (make sync-notebooks).

    python tools/sync_notebooks.py                         every pair in chapters/ and labs/source/
    python tools/sync_notebooks.py --keep chapters/02_caching_allocator.md     that side wins its pair

The .md is the declared source, but JupyterLab (or an editor) may have saved either side.  A pair
is compared by its cells (type, source, tags, claims metadata), not by time stamps or bytes, and the side that
changed is found against the last sync: the text both sides agreed on then (recorded in
build/notebook-sync-v2.json), or, before any sync on this clone, the committed .md (git HEAD).

* both sides say the same: nothing is written (not even a trailing newline);
* one side is untouched since the last sync: the other side's edit is copied into it (an .md
  edit into the .ipynb keeps the notebook's outputs: jupytext's combine_inputs_with_outputs);
* both changed, or no last sync is known: nothing is written for that pair, and the tool says
  which files and the one command that keeps either side (--keep, make sync-notebooks KEEP=...).

Why not `jupytext --sync`: it picks the side with the newer time stamp, so a newer-stamped
.ipynb holding older text silently overwrites an .md edit.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
from jupytext.combine import combine_inputs_with_outputs

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ("chapters/[0-9][0-9]_*.md", "labs/source/lab[0-9][0-9]_*.md")
# relative to the root, never committed (build/); v2 since the compared text holds the claims metadata
# (an older record would make every pair look edited on both sides)
STATE = Path("build") / "notebook-sync-v2.json"
MD = "md:myst"


def cells(nb) -> str:
    """What a pair must agree on, as one comparable text: each cell's type, source, tags and claims
    metadata (a markdown cell's ``claims``, a code cell's ``claim_checks``: an edit of either in the .md
    must reach the .ipynb the tests run)."""
    return json.dumps([(c.cell_type, c.source.rstrip("\n"), list(c.get("metadata", {}).get("tags", [])),
                        c.get("metadata", {}).get("claims"), c.get("metadata", {}).get("claim_checks"))
                       for c in nb.cells], sort_keys=True)     # the .ipynb stores a dict sorted


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def committed_md(root: Path, md: Path) -> str | None:
    """The .md as git HEAD has it (None outside git, or when it is new)."""
    rel = md.relative_to(root).as_posix()
    out = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{rel}"], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def sync_pair(root: Path, md: Path, last: str | None, keep: str | None) -> tuple[str, str | None]:
    """Sync one pair; returns (what happened, the agreed digest now, or None when refused)."""
    ipynb = md.with_suffix(".ipynb")
    text_md = cells(jupytext.read(md, fmt=MD))
    if not ipynb.exists():
        write_ipynb(root, md)
        return f"wrote {ipynb.relative_to(root)} (it was missing)", digest(text_md)
    text_nb = cells(nbformat.read(ipynb, as_version=4))
    if text_md == text_nb:
        return "", digest(text_md)
    if last is None:
        head = committed_md(root, md)
        last = digest(cells(jupytext.reads(head, fmt=MD))) if head is not None else None
    md_edited, nb_edited = digest(text_md) != last, digest(text_nb) != last
    if keep == "md" or (keep is None and md_edited and not nb_edited):
        write_ipynb(root, md)
        return f"{md.relative_to(root)} -> {ipynb.name} (the .md was edited)", agreed(md)
    if keep == "ipynb" or (keep is None and nb_edited and not md_edited):
        jupytext.write(nbformat.read(ipynb, as_version=4), md, fmt=MD)
        return f"{ipynb.relative_to(root)} -> {md.name} (the .ipynb was edited)", agreed(md)
    rel_md, rel_nb = md.relative_to(root), ipynb.relative_to(root)
    since = "since the last sync" if last else "and no last sync is known (not in git, not synced here)"
    return (f"REFUSED {rel_md} and {rel_nb} differ, both edited {since}: nothing written for them. Keep the "
            f".md (the .ipynb's edit is lost): make sync-notebooks KEEP={rel_md}; keep the .ipynb: "
            f"make sync-notebooks KEEP={rel_nb}; to keep parts of both, copy one edit into the other file "
            "first"), None


def agreed(md: Path) -> str:
    """The digest both files now share, read back from disk (what the next run compares with)."""
    text_md = cells(jupytext.read(md, fmt=MD))
    if text_md != cells(nbformat.read(md.with_suffix(".ipynb"), as_version=4)):
        raise SystemExit(f"{md}: its pair still differs after the sync: please report this")
    return digest(text_md)


def write_ipynb(root: Path, md: Path) -> None:
    """The .md's cells into its .ipynb, keeping the notebook's outputs where the inputs still match."""
    ipynb = md.with_suffix(".ipynb")
    if md.parent == root / "labs" / "source":
        from allocator_ref.labs import generate      # a lab's pair has stable cell ids (make student)
        ipynb.write_text(generate.paired_text(md))
        return
    nb = jupytext.read(md, fmt=MD)
    if ipynb.exists():
        nb = combine_inputs_with_outputs(nb, nbformat.read(ipynb, as_version=4), fmt=MD)
    jupytext.write(nb, ipynb, fmt="ipynb")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/sync_notebooks.py", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the course folder (default: this checkout)")
    parser.add_argument("--keep", type=Path, help="a .md or .ipynb whose side wins its pair")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    pairs = sorted(md for pattern in PAIRS for md in root.glob(pattern))
    keep_md, keep_side = None, None
    if args.keep:
        keep = (args.keep if args.keep.is_absolute() else Path.cwd() / args.keep).resolve()
        keep_md, keep_side = keep.with_suffix(".md"), keep.suffix.lstrip(".")
        if keep_md not in pairs or keep_side not in ("md", "ipynb"):
            print(f"error: KEEP={args.keep} is not the .md or .ipynb of a chapter or lab source", file=sys.stderr)
            return 2
    state_file = root / STATE
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    refused = 0
    for md in pairs:
        rel = md.relative_to(root).as_posix()
        said, agreed = sync_pair(root, md, state.get(rel), keep_side if md == keep_md else None)
        if said:
            print(said, file=sys.stderr if agreed is None else sys.stdout)
        if agreed is None:
            refused += 1
        else:
            state[rel] = agreed
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    print(f"{len(pairs) - refused} of {len(pairs)} pairs in sync" + (f"; {refused} refused (above)" if refused else ""))
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
