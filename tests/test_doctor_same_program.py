"""Devices that recorded the same program share one set of what-if rows (memory_doctor/same_program.py).

A file of three devices: two recorded the same program (a copy of one device's trace and segments,
as DDP ranks with static shapes record), one another program.  The doctor replays the what-ifs
once per program, verifies every device on its own, and says whose rows a device shows, in the
text, the JSON and the page, in English and in Chinese.  A copy with one size changed is another
program: the grouping splits.
"""
from __future__ import annotations

import copy
import html
import json

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.editions import language as lang
from allocator_ref.memory_doctor import same_program
from allocator_ref.trace.recording import device_recording, load_recording

MiB = 2**20
pytestmark = pytest.mark.usefixtures("plain_language")      # tests/conftest.py


def recorded(n: int, index: int = 0) -> dict:
    """A course-made run of ``n`` 7 MiB allocations, every other one freed."""
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb", index=index), "")
    a.record_memory_history(max_entries=10_000)
    xs = [a.malloc(7 * MiB) for _ in range(n)]
    for x in xs[::2]:
        a.free(x)
    return a.snapshot()


def three_devices(change_copy: bool = False, more: int = 0) -> dict:
    """Device 0 and its copy as device 1 (the same program), device 2 a longer program (busiest),
    then ``more`` copies of device 0."""
    one, other = recorded(6), recorded(11)
    segs0, trace0 = one["segments"], one["device_traces"][0]
    segs1, trace1 = copy.deepcopy(segs0), copy.deepcopy(trace0)
    for e in trace1:                    # another rank records its own times: not part of the program
        e["time_us"] = e.get("time_us", 0) + 12345
    if change_copy:                     # one request 512 bytes larger: another program
        alloc = next(e for e in trace1 if e["action"] == "alloc")
        alloc["size"] += 512
    return {"segments": [dict(s, device=0) for s in segs0] + [dict(s, device=1) for s in segs1]
            + [dict(s, device=2) for s in other["segments"]]
            + [dict(s, device=3 + k) for k in range(more) for s in copy.deepcopy(segs0)],
            "device_traces": [trace0, trace1, other["device_traces"][0]] + [copy.deepcopy(trace0)] * more,
            "allocator_settings": one.get("allocator_settings", {})}


def test_the_key_holds_what_a_whatif_reads_and_nothing_else():
    rec = load_recording(three_devices())
    key = {i: same_program.program_key(rec.device(i), rec.config) for i in range(3)}
    assert key[0] == key[1] != key[2]                       # time_us differs, the program does not
    assert same_program.groups(key) == {0: [1], 2: []}
    changed = load_recording(three_devices(change_copy=True))
    assert same_program.program_key(changed.device(0)) != same_program.program_key(changed.device(1))
    # a recorded address enters (the what-if restores segments at PyTorch's addresses)
    dev = rec.device(0)
    events = [dict(e) for e in dev.raw]
    assert same_program.program_key(device_recording(events, dev.segments)) == same_program.program_key(dev)
    events[0]["addr"] += 2 * MiB
    assert same_program.program_key(device_recording(events, dev.segments)) != same_program.program_key(dev)
    # so do the doctor's arguments
    assert same_program.program_key(rec.device(0), "", 24.0) != same_program.program_key(rec.device(0), "", 40.0)
    assert same_program.spans([5, 1, 2, 3, 9, 10]) == "1-3, 5, 9-10"


def test_identical_devices_share_rows_and_a_changed_copy_gets_its_own():
    report = ar.doctor(three_devices())
    assert [r.diagnosis.device for r in report.reports] == [2, 0, 1]          # busiest first
    assert report.same_program == {1: 0}
    by = {r.diagnosis.device: r for r in report.reports}
    assert by[1].remedies is by[0].remedies and by[1].capacity is by[0].capacity    # replayed once
    assert by[2].remedies is not by[0].remedies
    assert by[1].diagnosis is not by[0].diagnosis and by[1].diagnosis.verified     # verified on its own
    assert by[1].diagnosis.peak_reserved == by[0].diagnosis.peak_reserved
    # a follower keeps less (its device's parsed part is dropped) and still draws its own page
    assert "<html" in by[1].html() and by[1].diagnosis.reserved[-1] == by[0].diagnosis.reserved[-1]
    line = "device 1 recorded the same program as device 0: its what-if rows are device 0's"
    assert line in report.text()
    j = report.to_json()
    assert j["same_program"] == {"1": 0} and line in j["same_program_words"][0]
    assert [x.get("what_if_rows_of_device") for x in j["each_device"]] == [None, None, 0]
    assert html.escape(line) in report.html()
    split = ar.doctor(three_devices(change_copy=True))
    assert split.same_program == {} and "recorded the same program" not in split.text()
    mine = {r.diagnosis.device: r for r in split.reports}
    assert mine[1].remedies is not mine[0].remedies


def test_the_shared_rows_are_said_in_chinese(tmp_path, capsys):
    with lang.speaking("zh"):
        report = ar.doctor(three_devices())
    text, page, j = report.text(), report.html(), report.to_json()
    zh = j["same_program_words"][0]
    assert "recorded the same program" not in text and zh in text and html.escape(zh) in page
    assert "设备 1" in zh and "设备 0" in zh
    path = ar.save_snapshot(three_devices(), tmp_path / "three.pickle")
    assert main(["doctor", str(path), "--json", "--lang", "zh"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["same_program"] == {"1": 0} and out["same_program_words"] == [zh]


def without_seconds(j):
    if isinstance(j, dict):
        return {k: without_seconds(v) for k, v in j.items() if k != "seconds"}
    return [without_seconds(v) for v in j] if isinstance(j, list) else j


FORKED_DOCTOR = """
import json, sys
sys.path.insert(0, TESTS)
from test_doctor_same_program import three_devices
import allocator_ref as ar
from allocator_ref.memory_doctor import workers
forked = []
real = workers.map_forked
def spy(fn, items, n):
    forked.append([n, workers.can_fork()])
    return real(fn, items, n)
workers.map_forked = spy
spread = ar.doctor(three_devices(more=3))
by = {r.diagnosis.device: r for r in spread.reports}
print(json.dumps({"forked": forked, "same": {str(k): v for k, v in spread.same_program.items()},
                  "json": spread.to_json(), "text": spread.text(),
                  "shared": by[4].remedies is by[0].remedies and by[4].diagnosis.recording is by[0].diagnosis.recording,
                  "page": "<html" in by[4].html()}))
"""


def test_followers_verified_on_forked_workers_say_what_one_process_says(monkeypatch):
    """Run in a fresh process: the forked path is taken only with one thread (workers.can_fork), and a
    pytest worker may hold another module's threads."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    from allocator_ref.memory_doctor import workers
    snap = three_devices(more=3)                  # followers 1, 3, 4, 5: spread over two workers
    monkeypatch.setenv("ALLOCATOR_REF_WORKERS", "1")
    alone = ar.doctor(snap)
    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, ALLOCATOR_REF_WORKERS="2",
               PYTHONPATH=os.pathsep.join(filter(None, [str(Path(tests).parent), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", FORKED_DOCTOR.replace("TESTS", repr(tests))], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    spread = json.loads(out.stdout.strip().splitlines()[-1])
    assert spread["forked"] == [[min(2, workers.cores()), True]]        # it forked: one thread there
    assert spread["same"] == {str(k): v for k, v in alone.same_program.items()} == {"1": 0, "3": 0, "4": 0, "5": 0}
    assert without_seconds(spread["json"]) == without_seconds(alone.to_json())
    assert spread["text"] == alone.text()
    assert spread["shared"] and spread["page"]    # the follower's rows are the leader's; its page drawn here
