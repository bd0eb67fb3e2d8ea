"""A graded room's copy of the course: the course as committed, without its solutions.

    python workshop/room_copy.py COURSE_FOLDER        (make nbgrader runs it after each release)

A graded room's learners pull the course from COURSE_FOLDER/course.git, a bare repository made
here from this checkout's HEAD with every path that holds a solution left out (LEFT_OUT: the lab
sources, labs/solutions.json, the known-wrong answers, which differ from a solution by one line,
the tests, which run the solutions, and the Chinese lab sources' catalogues).  Its history is its
own: each publish is a commit whose parent is the previous publish, never the course's own
history, so no object of the repository holds a solution, and a learner's re-pull (nbgitpuller,
`make pull-link`) is a fast-forward that keeps their edits.

Before it publishes, it looks for each exercise's solution in every file it would publish (the
lines of the solution region that the student copy does not have) and refuses, naming the file,
when one file holds a whole solution: a solution pasted into a new file cannot slip through.

The self-paced room (no WORKSHOP_GRADED) keeps pulling the course itself, solutions included:
show_solution() needs them there.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOM_REPO = "course.git"              # inside the nbgrader course folder, next to release/
BRANCH = "main"
# Every path of the course that holds a solution (or, for labs/wrong, one line away from one).
LEFT_OUT = ("labs/solutions.json", "labs/source", "labs/wrong", "tests", "locale/zh_CN/labs/source")


class RoomCopyError(RuntimeError):
    """The room's copy could not be made safely; the message says what to do."""


def _git(*args: str, cwd: Path = ROOT, env: dict | None = None, check: bool = True) -> str:
    """git in `cwd` (the instructor's checkout), its output; a failure is a RoomCopyError."""
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    if check and out.returncode != 0:
        raise RoomCopyError(f"git {' '.join(args[:3])} failed: {out.stderr.strip()[-300:]}")
    return out.stdout.strip()


def solution_lines(root: Path = ROOT) -> dict[str, set[str]]:
    """{exercise id: the lines of its solution the student copy does not have} (the same lines
    grading.py's release refuses to ship), from the lab sources of `root`."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))          # run as a script: the course's own package
    from allocator_ref.labs import generate, grading
    found = {}
    for path in sorted((root / "labs" / "source").glob("lab[0-9][0-9]_*.md")):
        student, solutions = generate.build_notebook(generate.read_source(path), path)
        given = grading._source_lines(student)
        for ex_id, text in solutions.items():
            lines = {line.strip() for line in text.splitlines()}
            found[ex_id] = {line for line in lines if len(line) >= 12 and not line.startswith("#")
                            and given[line] == 0}
    return found


def leaks(files: dict[str, str], solutions: dict[str, set[str]]) -> list[str]:
    """'FILE holds EXERCISE's solution' for every file that holds every line of a solution."""
    return [f"{name} holds {ex_id}'s solution" for name, text in sorted(files.items())
            for ex_id, lines in sorted(solutions.items()) if lines and all(line in text for line in lines)]


def _tree_without_solutions(commit: str, root: Path) -> str:
    """The tree of `commit` less LEFT_OUT, written into this repository's objects (a private index:
    the instructor's own index and work tree are not touched)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git("read-tree", commit, cwd=root, env=env)
        _git("rm", "-r", "--cached", "--quiet", "--ignore-unmatch", "--", *LEFT_OUT, cwd=root, env=env)
        return _git("write-tree", cwd=root, env=env)


def _published_files(tree: str, root: Path) -> dict[str, str]:
    names = _git("ls-tree", "-r", "--name-only", "-z", tree, cwd=root).split("\0")
    files = {}
    for name in filter(None, names):
        data = subprocess.run(["git", "cat-file", "blob", f"{tree}:{name}"], cwd=root,
                              capture_output=True).stdout
        if b"\0" not in data[:8000]:           # text only: a picture holds no solution
            files[name] = data.decode("utf-8", "replace")
    return files


def publish(course: Path, commit: str = "HEAD", root: Path = ROOT) -> Path:
    """Make or update COURSE/course.git (branch main) from `commit` of the checkout `root`, less
    LEFT_OUT; returns its path."""
    course, root = course.resolve(), root.resolve()
    if not (course / "release").is_dir():
        raise RoomCopyError(f"no release in {course}: run make nbgrader LAB=NN first")
    head = _git("rev-parse", "--verify", f"{commit}^{{commit}}", cwd=root)
    tree = _tree_without_solutions(head, root)
    found = leaks(_published_files(tree, root), solution_lines(root))
    if found:
        raise RoomCopyError(f"{found[0]} (and {len(found) - 1} more): move it under one of "
                            f"{', '.join(LEFT_OUT)} or remove it, commit, and run make nbgrader again")
    dest = course / ROOM_REPO
    if not dest.exists():
        _git("init", "--quiet", "--bare", "--initial-branch", BRANCH, str(dest))
    parent = None
    if _git("--git-dir", str(dest), "rev-parse", "--verify", "--quiet", BRANCH, check=False):
        _git("fetch", "--quiet", str(dest), BRANCH, cwd=root)   # the previous publish: the new one's parent
        parent = _git("rev-parse", "FETCH_HEAD", cwd=root)
        if _git("rev-parse", f"{parent}^{{tree}}", cwd=root) == tree:
            print(f"the graded room's course is up to date: {dest} (from {head[:10]})")
            return dest
    # one author for every publish: the instructor's identity is not the learners' business
    who = {"GIT_AUTHOR_NAME": "allocator-course", "GIT_AUTHOR_EMAIL": "course@localhost",
           "GIT_COMMITTER_NAME": "allocator-course", "GIT_COMMITTER_EMAIL": "course@localhost"}
    new = _git("commit-tree", tree, *(["-p", parent] if parent else []), "-m",
               f"The course at {head[:10]} without its solutions (workshop/room_copy.py)", cwd=root, env=who)
    _git("push", "--quiet", "--force", str(dest), f"{new}:refs/heads/{BRANCH}", cwd=root)
    _open_to_learners(dest)
    print(f"the graded room's course: {dest} (from {head[:10]}, without {', '.join(LEFT_OUT)})")
    return dest


def _open_to_learners(dest: Path) -> None:
    """Learners clone it as themselves: readable by all, writable by the instructor only."""
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def holds_solutions(repo: str, branch: str) -> bool:
    """Does `branch` of the repository a room pulls hold labs/solutions.json or a lab source?"""
    listed = subprocess.run(["git", "-c", "safe.directory=*", "-C", repo, "ls-tree", "--name-only", branch, "labs/"],
                            capture_output=True, text=True)
    if listed.returncode != 0:               # not a local repository (a URL): nothing to look at here
        return False
    return any(line in ("labs/solutions.json", "labs/source") for line in listed.stdout.split())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python workshop/room_copy.py COURSE_FOLDER  (make nbgrader LAB=NN runs it)")
    try:
        publish(Path(sys.argv[1]))
    except RoomCopyError as exc:
        sys.exit(f"error: {exc}")
