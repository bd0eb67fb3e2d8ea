"""The instructor's live view: which learner passed which exercise, as they run check().

A JupyterHub service the hub starts when the room opts in (WORKSHOP_LIVE_VIEW=1, jupyterhub_config.py),
at https://SERVER:8000/services/live-view/.  It reads each learner's ~/.allocator-course/live.json
(written by check(): allocator_ref/labs/live.py) and shows one row per learner, one column per
exercise, refreshed every 10 s; /services/live-view/api gives the same as JSON.

Who sees it: the hub's admin only.  JupyterHub lets a user reach a service only with the scope
access:services!service=live-view, which the admin role holds (all of access:services) and a learner
does not, so HubOAuthenticated (jupyterhub.services.auth) refuses a learner with 403; the handler also
refuses any user the hub does not call admin.  It runs as the hub's user (root) to read the homes, so
it treats each file as hostile: opened without following links, a regular file owned by the home's
owner, at most 64 KiB, only exercise ids and plain values taken from it, everything escaped.
"""
from __future__ import annotations

import html
import json
import os
import re
import time
from pathlib import Path

MAX_BYTES = 64 * 1024                      # allocator_ref/labs/live.py MAX_BYTES
EXERCISE = re.compile(r"^lab\d{1,2}\.[A-Za-z_][A-Za-z0-9_]{0,60}$")
ROOM_CHECK = re.compile(r"^roomcheck\d+[0-9a-f]{6}$")          # make room-check's test learners
LIVE_FILE = (".allocator-course", "live.json")


def _read_live(home: Path) -> dict:
    """The learner's live.json, read the careful way; {} when missing or not what check() writes."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    fds = []
    try:
        fds.append(os.open(home, flags | os.O_DIRECTORY))
        owner = os.fstat(fds[0]).st_uid
        fds.append(os.open(LIVE_FILE[0], flags | os.O_DIRECTORY, dir_fd=fds[0]))
        fds.append(os.open(LIVE_FILE[1], flags, dir_fd=fds[1]))
        st = os.fstat(fds[-1])
        if st.st_uid != owner or (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_BYTES:
            return {}
        data = json.loads(os.read(fds[-1], MAX_BYTES))
    except (OSError, ValueError):
        return {}
    finally:
        for fd in fds:
            os.close(fd)
    if not isinstance(data, dict):
        return {}
    found = {}
    for key, value in data.items():
        if isinstance(key, str) and EXERCISE.match(key) and isinstance(value, dict):
            attempts, at = value.get("attempts"), value.get("at")
            found[key] = {"passed": value.get("passed") is True, "untouched": value.get("untouched") is True,
                          "attempts": attempts if isinstance(attempts, int) and 0 <= attempts < 10**6 else 0,
                          "at": at if isinstance(at, int) and 0 <= at < 2**40 else 0}
    return found


def room(homes: Path) -> dict[str, dict]:
    """{learner: {exercise: outcome}} for every home under `homes` (room-check learners left out)."""
    try:
        names = sorted(os.listdir(homes))
    except OSError:
        return {}
    return {name: _read_live(homes / name) for name in names
            if not name.startswith(".") and not ROOM_CHECK.match(name) and (homes / name).is_dir()}


def page(seen: dict[str, dict], now: float) -> str:
    """The table: learners by exercises; PASS, FAIL (failed attempts), written-not-yet, or blank."""
    exercises = sorted({ex for outcomes in seen.values() for ex in outcomes},
                       key=lambda e: (int(e[3:].split(".")[0]), e))
    head = "".join(f"<th>{html.escape(e)}</th>" for e in exercises)
    rows = []
    for learner, outcomes in seen.items():
        cells = []
        for ex in exercises:
            got = outcomes.get(ex)
            if got is None:
                cells.append("<td></td>")
            elif got["passed"]:
                cells.append('<td class="pass">PASS</td>')
            elif got["untouched"]:
                cells.append('<td class="todo">not written</td>')
            else:
                cells.append(f'<td class="fail">FAIL ({got["attempts"]})</td>')
        last = max((o["at"] for o in outcomes.values()), default=0)
        ago = f"{(now - last) / 60:.0f} min ago" if last else "no check yet"
        rows.append(f"<tr><th>{html.escape(learner)}</th>{''.join(cells)}<td>{ago}</td></tr>")
    return ("<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='10'>"
            "<title>Live view</title><style>td,th{padding:2px 8px;border:1px solid #ccc}"
            ".pass{background:#cfc}.fail{background:#fcc}.todo{color:#888}</style></head><body>"
            f"<h1>Who passed what</h1><p>{len(seen)} learners; refreshed every 10 s. A learner's own "
            "record: the grades come from make autograde.</p>"
            f"<table><tr><th>learner</th>{head}<th>last check</th></tr>{''.join(rows)}</table></body></html>")


def refusal() -> str:
    """What a learner who opens the live view reads, in the room's language (the hub passes WORKSHOP_LANGUAGE)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from room_language import learner_line
    return learner_line("instructor_only", os.environ.get("WORKSHOP_LANGUAGE", "en"))


def make_app(homes: Path, prefix: str):
    """The tornado application behind the hub's proxy, under the service's prefix."""
    from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
    from tornado import web

    class View(HubOAuthenticated, web.RequestHandler):
        @web.authenticated
        def get(self, what: str = ""):
            if not self.current_user.get("admin"):        # the hub's scope check first, this second
                self.set_status(403)                        # its line as the page (an error's text is not shown)
                self.set_header("Content-Type", "text/plain; charset=utf-8")
                self.finish(refusal())
                return
            seen = room(homes)
            self.set_header("Cache-Control", "no-store")
            if what == "api":
                self.finish({"learners": seen})
            else:
                self.finish(page(seen, time.time()))

    return web.Application([
        (rf"{prefix}oauth_callback", HubOAuthCallbackHandler),
        (rf"{prefix}(api)?", View),
    ], cookie_secret=os.urandom(32))


def main() -> None:
    from urllib.parse import urlparse

    from tornado.ioloop import IOLoop
    homes = Path(os.environ["WORKSHOP_HOMES"])
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/live-view/")
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    make_app(homes, prefix).listen(url.port, url.hostname)
    IOLoop.current().start()


if __name__ == "__main__":
    main()
