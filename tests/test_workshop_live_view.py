"""The live view's two halves without a hub: check() keeps its result in a room that opted in
(allocator_ref/labs/live.py), and the service reads a learner's file as the hostile file it is
(workshop/live_view.py).  The hub serving it to the admin and refusing learners is
tests/test_workshop_hub.py's test_the_live_view_shows_the_admin_who_passed_what_and_refuses_a_learner."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from allocator_ref.labs import live
from allocator_ref.labs.check import check

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workshop"))
live_view = pytest.importorskip("live_view")


def test_check_keeps_its_result_only_in_a_room_that_opted_in(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("ALLOCATOR_REF_LIVE_VIEW", raising=False)
    check("lab9.stranded", lambda snapshot: 0, hidden=1, verbose=False)
    assert not live.path(tmp_path).exists()                          # not opted in: nothing written
    monkeypatch.setenv("ALLOCATOR_REF_LIVE_VIEW", "1")
    check("lab9.stranded", lambda snapshot: 0, hidden=1, verbose=False)
    check("lab9.stranded", None, hidden=1, verbose=False)       # an untouched stub
    kept = json.loads(live.path(tmp_path).read_text())
    assert kept["lab9.stranded"]["passed"] is False and kept["lab9.stranded"]["attempts"] >= 1
    assert live.path(tmp_path).stat().st_mode & 0o077 == 0
    seen = live_view.room(tmp_path.parent)[tmp_path.name]
    assert seen["lab9.stranded"]["passed"] is False


def test_the_service_reads_a_learners_file_as_hostile(tmp_path):
    homes = tmp_path / "homes"
    good = homes / "ada" / ".allocator-course"
    good.mkdir(parents=True)
    (good / "live.json").write_text(json.dumps({
        "lab2.round_size": {"passed": True, "attempts": 2, "at": 5},
        "<script>": {"passed": True}, "lab2.merge": {"passed": "yes", "attempts": -4, "at": "now"}}))
    link = homes / "bob" / ".allocator-course"
    link.mkdir(parents=True)
    (link / "live.json").symlink_to("/etc/passwd")                   # root would follow it
    fifo = homes / "cy" / ".allocator-course"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "live.json")                                   # a read would block the service
    big = homes / "dee" / ".allocator-course"
    big.mkdir(parents=True)
    (big / "live.json").write_text(" " * (live_view.MAX_BYTES + 1) + "{}")
    (homes / "roomcheck1a1b2c3").mkdir()
    seen = live_view.room(homes)
    assert set(seen) == {"ada", "bob", "cy", "dee"}
    assert seen["ada"] == {"lab2.round_size": {"passed": True, "untouched": False, "attempts": 2, "at": 5},
                           "lab2.merge": {"passed": False, "untouched": False, "attempts": 0, "at": 0}}
    assert seen["bob"] == seen["cy"] == seen["dee"] == {}
    page = live_view.page({"<b>x</b>": seen["ada"]}, 65.0)
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page and "PASS" in page and "FAIL (0)" in page
