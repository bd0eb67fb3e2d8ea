"""Hand out, collect and hand back a graded lab through the hub itself: a room on Kubernetes.

    python workshop/hub_exchange.py hand-out  02 https://course.example.org --token-file ~/.room-token
    python workshop/hub_exchange.py collect   02 https://course.example.org --token-file ~/.room-token
    python workshop/hub_exchange.py feedback  02 https://course.example.org --token-file ~/.room-token

(`make hand-out LAB=02 HUB=https://...`, `make collect ...`, `make feedback ...`.)

On Zero to JupyterHub each learner's home is their own volume, mounted only in their own pod,
so there is no folder to copy from as on one machine.  The instructor reaches each learner's
~/graded/labNN/ the way JupyterLab does, through the learner's Jupyter server behind the hub,
with a token of theirs that holds the role `grader` (access to learners' servers: the values
file's hub.loadRoles; the one-machine hub gives it too).  A server that is not running is
started for the call and stopped after.  Nothing passes through a shared volume (every pod runs
as the same uid 1000, so one would be readable by every learner), and nothing extra runs in
the cluster: the same ~/graded/labNN/ as on one machine, the same nbgrader course folder on
the instructor's own machine (collect writes submitted/ readable by them only:
allocator_ref/labs/gradebook.py), then make autograde as anywhere.

The token: log in as the instructor, Hub Control Panel > Token, request one, and save it in a
file only you can read (install -m 600 /dev/null ~/.room-token, then paste it in).  It goes to the
hub's own API only, never to a learner's server: the proxy would hand it to a server the learner
controls (their own jupyter_server_config.py runs when a stopped server starts), and the room-wide
token opens every learner's files.  For each learner the hub issues a token *of that learner's*
(POST /hub/api/users/NAME/tokens, the grader role's `tokens` scope), scoped to their own server
(``access:servers!user=NAME``) and valid for TOKEN_S seconds; it is deleted when their exchange ends.
"""
from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from room_check import Learner, RoomError  # noqa: E402  (the same hub client as the room check)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from allocator_ref.labs import due, gradebook, grading  # noqa: E402

FOLDER = grading.GRADED_FOLDER
TOKEN_S = 600                 # a learner-scoped token's life: one learner's exchange, with its server's start


def instructor(hub: str, token_file: Path, verify) -> Learner:
    if token_file.stat().st_mode & 0o077:
        raise RoomError(f"{token_file} can be read by other users: chmod 600 {token_file}")
    me = Learner(hub.rstrip("/"), "", token=token_file.read_text().strip(), verify=verify)
    r = me.api("GET", "/user")
    if not r.ok:
        raise RoomError(f"the hub refused the token in {token_file} ({r.status_code}): request a new one "
                        "as the instructor (Hub Control Panel > Token)")
    me.name = r.json()["name"]
    return me


def learners(me: Learner) -> list[str]:
    r = me.api("GET", "/users")
    r.raise_for_status()
    return sorted(u["name"] for u in r.json() if not u.get("admin") and u["name"] != me.name)


def _ready(me: Learner, name: str) -> bool:
    server = me.api("GET", f"/users/{name}").json().get("servers", {}).get("")
    return bool(server and server.get("ready"))


def _with_server(me: Learner, name: str, work):
    """Run work(token) with `name`'s server up (started for it, and stopped after, when it was not) and a
    token of theirs scoped to that server (learner_token)."""
    started = not _ready(me, name)
    if started:
        me.api("POST", f"/users/{name}/server")
        deadline = time.monotonic() + 300
        while not _ready(me, name):
            if time.monotonic() > deadline:
                raise RoomError(f"{name}'s server did not start within 300 s")
            time.sleep(1)
    try:
        with learner_token(me, name) as token:
            return work(token)
    finally:
        if started:
            me.api("DELETE", f"/users/{name}/server")


@contextmanager
def learner_token(me: Learner, name: str):
    """A token of ``name``'s own that opens only their server and lives TOKEN_S seconds, deleted after:
    what a learner's server sees (the proxy forwards it) is worth nothing beyond what they already have."""
    r = me.api("POST", f"/users/{name}/tokens", json={"scopes": [f"access:servers!user={name}"],
                                                      "expires_in": TOKEN_S, "note": "graded lab exchange"})
    if r.status_code not in (200, 201):
        raise RoomError(f"the hub would not issue a token for {name}'s server ({r.status_code}): the instructor "
                        "needs the grader role with the `tokens` scope (workshop/jupyterhub_config.py, the "
                        "values file's hub.loadRoles)")
    issued = r.json()
    try:
        yield issued["token"]
    finally:
        me.api("DELETE", f"/users/{name}/tokens/{issued['id']}")


def _contents(me: Learner, name: str, method: str, path: str, token: str, **kw):
    """A contents API call on ``name``'s server with ``token`` (theirs: learner_token), never the instructor's."""
    if token == me.token:
        raise RoomError("refusing to send the instructor's token to a learner's server")
    headers = {"Authorization": f"token {token}"}
    return me.request(method, f"{me.hub}/user/{name}/api/contents/{path}", headers=headers, **kw)


def _put(me: Learner, name: str, path: str, model: dict, token: str) -> None:
    parts = path.split("/")
    for i in range(1, len(parts)):          # the folders first (PUT of a folder that exists is fine)
        _contents(me, name, "PUT", "/".join(parts[:i]), token, json={"type": "directory"})
    r = _contents(me, name, "PUT", path, token, json=model)
    if r.status_code not in (200, 201):
        raise RoomError(f"could not write {path} for {name}: {r.status_code} {r.text[:200]}")


def hand_out(lab: str, me: Learner, course: Path) -> list[str]:
    """Each learner gets release/labNN/*.ipynb in ~/graded/labNN/, once (started work is kept)."""
    name = grading.assignment_name(lab)
    notebooks = sorted((course / "release" / name).glob("*.ipynb"))
    if not notebooks:
        raise RoomError(f"no release for {name} in {course}: run make nbgrader LAB={lab} first")
    given = []
    dates = due.due_dates(name, course)       # a due date set: each learner's own, in ~/graded/labNN/due.json
    for learner in learners(me):
        def work(token, learner=learner):
            for nb in notebooks:
                path = f"{FOLDER}/{name}/{nb.name}"
                if _contents(me, learner, "GET", path, token, params={"content": 0}).status_code == 404:
                    _put(me, learner, path, {"type": "notebook", "content": json.loads(nb.read_text())}, token)
                    given.append(f"{learner}: {path}")
            if dates[0] is not None:          # refreshed at every hand-out: make due, make extend, then this
                _put(me, learner, f"{FOLDER}/{name}/{due.NOTICE}", {"type": "file", "format": "text",
                     "content": due.notice(name, learner, dates).decode()}, token)
        _with_server(me, learner, work)
    print(f"handed out {name} to {len(given)} learners")
    return given


def collect(lab: str, me: Learner, course: Path) -> list[Path]:
    """Each learner's ~/graded/labNN/*.ipynb into submitted/<learner>/labNN/ (yours only)."""
    name = grading.assignment_name(lab)
    release = sorted((course / "release" / name).glob("*.ipynb"))
    lab_due, extended = due.due_dates(name, course)
    copied, kept = [], []
    for learner in learners(me):
        def work(token, learner=learner):
            models = {}
            for nb in release:
                r = _contents(me, learner, "GET", f"{FOLDER}/{name}/{nb.name}", token)
                if r.status_code == 200:
                    models[nb.name] = r.json()
            if not models:
                return
            # when they last changed it, as the server says (the contents model's last_modified): the
            # submission time nbgrader reads from timestamp.txt, as make collect writes it on one machine
            changed = max(due.changed_at(m["last_modified"]) for m in models.values())
            dest = course / "submitted" / learner / name
            if due.keeps_on_time(dest, changed, extended.get(learner, lab_due)):
                kept.append(learner)          # the lab closed for them: the copy collected on time stays
                return
            with gradebook.private_files():
                dest.mkdir(parents=True, exist_ok=True)
                for file_name, model in models.items():
                    nbformat.write(nbformat.from_dict(model["content"]), dest / file_name)
                    copied.append(dest / file_name)
                due.write_timestamp(dest, changed)
        _with_server(me, learner, work)
    gradebook.private(course)
    for learner in kept:
        print(f"CLOSED {learner}: {name} changed after their due date; the copy collected before it is kept")
    print(f"collected {len(copied)} notebooks into {course / 'submitted'} (readable by you only)")
    due.say_late(name, course)
    return copied


def hand_back(lab: str, me: Learner, course: Path) -> list[str]:
    """make feedback's reports (feedback/<learner>/labNN/*.html) into ~/graded/labNN/feedback/."""
    name = grading.assignment_name(lab)
    given = []
    released = sorted((course / "release" / name).glob("*.ipynb"))
    report_name = released[0].with_suffix(".html").name if released else None
    for folder in sorted((course / "feedback").glob(f"*/{name}")):
        learner = folder.parent.name
        report = gradebook._report_of(folder / str(report_name))       # the notebook's report only, no link
        if report is None:
            continue
        path = f"{FOLDER}/{name}/feedback/{report_name}"
        data = base64.b64encode(report).decode()
        _with_server(me, learner, lambda token: _put(me, learner, path, {"type": "file", "format": "base64",
                                                                          "content": data}, token))
        given.append(f"{learner}: {path}")
    print(f"feedback handed back to {len(given)} learners, in ~/{FOLDER}/{name}/feedback/")
    return given


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python workshop/hub_exchange.py", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["hand-out", "collect", "feedback"])
    parser.add_argument("lab", help="the lab number, e.g. 02")
    parser.add_argument("hub", help="the hub's address, https://...")
    parser.add_argument("--token-file", type=Path, required=True, help="a file (mode 600) holding your hub token")
    parser.add_argument("--course", type=Path, default=grading.COURSE_DIR, help="the nbgrader course folder")
    parser.add_argument("--cert", help="the hub's certificate, when it is self-signed")
    args = parser.parse_args(argv)
    try:
        me = instructor(args.hub, args.token_file, args.cert or True)
        course = args.course.resolve()
        if args.action == "hand-out":
            hand_out(args.lab, me, course)
        elif args.action == "collect":
            collect(args.lab, me, course)
        else:
            gradebook.feedback(args.lab, course, homes=None)
            hand_back(args.lab, me, course)
    except (RoomError, grading.GradingError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
