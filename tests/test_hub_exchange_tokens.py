"""The room-wide token never goes to a learner's server (issue 57, item 2).

workshop/hub_exchange.py reaches each learner's ~/graded/ through their Jupyter server, behind
the hub's proxy, which forwards the Authorization header to a server the learner controls.  Here
the hub is a recording stand-in: every request the exchange makes is kept, and the test reads who
was sent which token.  (tests/test_workshop_hub.py runs the same path against a real hub.)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workshop"))
room = pytest.importorskip("room_check", reason="workshop/room_check.py needs requests + websocket-client")
hub_exchange = pytest.importorskip("hub_exchange")

ROOM_TOKEN = "room-wide-instructor-token"
LEARNERS = ("ada", "bea")


class Reply:
    def __init__(self, status: int, body=None):
        self.status_code, self._body = status, body if body is not None else {}
        self.ok, self.text = status < 400, json.dumps(self._body)

    def json(self):
        return self._body

    def raise_for_status(self):
        if not self.ok:
            raise RuntimeError(self.status_code)


class RecordingHub(room.Learner):
    """The instructor's client, talking to a stand-in hub that records every request."""

    def __init__(self):
        super().__init__("https://hub.example", "instructor", token=ROOM_TOKEN)
        self.sent, self.issued, self.deleted = [], {}, []

    def request(self, method, url, **kw):
        token = kw.get("headers", {}).get("Authorization", "").removeprefix("token ")
        self.sent.append((method, url, token, kw.get("json")))
        path = url.removeprefix(self.hub)
        if path == "/hub/api/users":
            return Reply(200, [{"name": n} for n in LEARNERS] + [{"name": "instructor", "admin": True}])
        if path.startswith("/hub/api/users/") and path.endswith("/tokens") and method == "POST":
            name = path.split("/")[4]
            self.issued[name] = kw["json"]
            return Reply(201, {"token": f"scoped-{name}", "id": f"id-{name}"})
        if "/tokens/" in path and method == "DELETE":
            self.deleted.append(path)
            return Reply(204)
        if path.startswith("/hub/api/users/"):
            return Reply(200, {"servers": {"": {"ready": True}}})
        if path.startswith("/user/"):
            return Reply(404) if method == "GET" else Reply(201)
        return Reply(404)


def test_each_learners_server_sees_only_a_short_lived_token_of_their_own(tmp_path):
    from allocator_ref.labs import grading
    course = tmp_path / "course"
    (course / "release" / "lab01").mkdir(parents=True)
    (course / "release" / "lab01" / "lab01_x.ipynb").write_text(json.dumps(
        {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    me = RecordingHub()
    given = hub_exchange.hand_out("01", me, course)
    assert len(given) == len(LEARNERS)
    to_servers = [(url, token) for _, url, token, _ in me.sent if url.startswith(f"{me.hub}/user/")]
    assert to_servers, "the exchange reached no learner's server: the test proves nothing"
    for url, token in to_servers:
        learner = url.split("/")[4]
        assert token == f"scoped-{learner}", f"{url} was sent {token!r}"
    for name in LEARNERS:
        asked = me.issued[name]
        assert asked["scopes"] == [f"access:servers!user={name}"] and 0 < asked["expires_in"] <= 600, asked
        assert f"/hub/api/users/{name}/tokens/id-{name}" in me.deleted      # gone when the exchange ends
    assert all(token == ROOM_TOKEN for _, url, token, _ in me.sent if url.startswith(f"{me.hub}/hub/api"))
    with pytest.raises(room.RoomError, match="instructor's token"):
        hub_exchange._contents(me, "ada", "GET", "graded", ROOM_TOKEN)


class ServingHub(RecordingHub):
    """The stand-in hub, with each learner's graded copy on their server, last changed at CHANGED[learner]."""

    CHANGED = {"ada": "2026-12-06T16:59:00.250000Z", "bea": "2026-12-06T19:30:00Z"}
    NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

    def request(self, method, url, **kw):
        path = url.removeprefix(self.hub)
        if path.startswith("/user/") and method == "GET" and path.endswith(".ipynb"):
            learner = path.split("/")[2]
            self.sent.append((method, url, kw.get("headers", {}).get("Authorization", "")[6:], None))
            return Reply(200, {"type": "notebook", "last_modified": self.CHANGED[learner],
                               "content": {**self.NOTEBOOK, "metadata": {"who": learner}}})
        return super().request(method, url, **kw)


def test_collect_on_kubernetes_writes_when_each_copy_was_last_changed(tmp_path, capsys):
    """hub_exchange collect writes nbgrader's timestamp.txt from the server's last_modified, so a lab's
    due date flags (and closes) there as on one machine; a later change never replaces an on-time copy."""
    pytest.importorskip("nbgrader.api", reason="nbgrader is in the test extras")
    from datetime import datetime
    from allocator_ref.labs import due
    course = tmp_path / "course"
    (course / "release" / "lab01").mkdir(parents=True)
    (course / "release" / "lab01" / "lab01_x.ipynb").write_text(json.dumps(ServingHub.NOTEBOOK))
    with due.open_gradebook(course) as gb:
        gb.update_or_create_assignment("lab01", duedate=datetime(2026, 12, 6, 17, 0))
    me = ServingHub()
    copied = hub_exchange.collect("01", me, course)
    assert len(copied) == 2
    stamps = {n: (course / "submitted" / n / "lab01" / "timestamp.txt").read_text().strip() for n in LEARNERS}
    assert stamps == {"ada": "2026-12-06 16:59:00.250000 UTC", "bea": "2026-12-06 19:30:00.000000 UTC"}
    assert "LATE bea: lab01 last changed 2.5 h after their due date" in capsys.readouterr().out
    assert due.late("lab01", course) == {"bea": pytest.approx(2.5)}
    me.CHANGED = {"ada": "2026-12-06T18:00:00Z", "bea": "2026-12-06T20:00:00Z"}
    hub_exchange.collect("01", me, course)
    said = capsys.readouterr().out
    assert "CLOSED ada" in said and "CLOSED bea" not in said
    assert (course / "submitted" / "ada" / "lab01" / "timestamp.txt").read_text().startswith("2026-12-06 16:59")
    to_servers = [(url, token) for _, url, token, _ in me.sent if url.startswith(f"{me.hub}/user/")]
    assert to_servers and all(token == f"scoped-{url.split('/')[4]}" for url, token in to_servers)
