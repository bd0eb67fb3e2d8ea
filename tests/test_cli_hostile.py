"""The CLI against hostile snapshots and arguments (issue 32, items 3, 4 and 7), run the way
a user runs it: ``python -m allocator_ref ...`` in a subprocess, on a real file."""
from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.device import SimDevice

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
EVIL = "\x1b]0;pwned\x07\x1b[2J\r\x1b[1AVERDICT: all good\u202e\x9b"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def cli(*args: str, env_extra: dict | None = None, timeout: float = 300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOCATOR_REF_")}
    env.update(PYTHONPATH=str(ROOT), ALLOCATOR_REF_DEVICE="sim", MPLBACKEND="Agg", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "allocator_ref", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def recorded_snapshot(streams: int = 1, oom: bool = True) -> dict:
    dev = SimDevice("h100-80gb")
    allocator = ar.CachingAllocator(dev)
    allocator.record_memory_history(enabled="all")
    side = [dev.create_stream() for _ in range(streams)]
    bufs = [allocator.malloc(3 * MiB)] + [allocator.malloc(MiB, s) for s in side]
    for b in bufs[1:]:
        allocator.free(b)
    if oom:
        try:
            allocator.malloc(1 << 40)
        except ar.OutOfMemoryError:
            pass
    snap = allocator.snapshot()
    allocator.free(bufs[0])
    return snap


def with_names(obj, name: str):
    """Every frame's name and file name replaced by ``name`` (what a shared file may say)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "frames" and isinstance(value, list):
                for frame in value:
                    frame["name"], frame["filename"] = name + "fn", name + "x.py"
            else:
                with_names(value, name)
    elif isinstance(obj, list):
        for value in obj:
            with_names(value, name)
    return obj


@pytest.fixture(scope="module")
def evil_snapshot(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("evil") / "evil.pickle"
    path.write_bytes(pickle.dumps(with_names(recorded_snapshot(), EVIL)))
    return path


# ------------------------------------------------------------------ item 7: what the CLI prints
@pytest.mark.parametrize("command", [["doctor"], ["replay"], ["replay", "--verify"], ["compare"]])
def test_control_characters_from_a_snapshot_are_printed_escaped(evil_snapshot, command):
    proc = cli(command[0], str(evil_snapshot), *command[1:])
    assert proc.returncode in (0, 1), proc.stderr
    for text in (proc.stdout, proc.stderr):
        raw = RAW_CONTROL.findall(text)
        assert not raw, f"raw control characters printed: {sorted(set(raw))!r}"
    if command == ["doctor"]:
        assert "\\x1b]0;pwned\\x07" in proc.stdout and "\\u202e" in proc.stdout   # shown, visibly


def test_an_error_message_naming_a_hostile_path_is_escaped(tmp_path):
    proc = cli("doctor", str(tmp_path / f"{EVIL}.pickle"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")
    assert not RAW_CONTROL.findall(proc.stderr) and "\\x1b[2J" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def small_snapshot(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("small") / "small.pickle"
    path.write_bytes(pickle.dumps(recorded_snapshot()))
    return path


def test_html_to_a_fifo_is_refused_before_the_work(small_snapshot, tmp_path):
    fifo = tmp_path / "report.html"
    os.mkfifo(fifo)
    proc = cli("doctor", str(small_snapshot), "--html", str(fifo), timeout=60)
    assert proc.returncode == 2 and "FIFO" in proc.stderr and proc.stdout == "", proc.stderr


def test_html_to_a_folder_is_refused_before_the_work(small_snapshot, tmp_path):
    proc = cli("doctor", str(small_snapshot), "--html", str(tmp_path), timeout=60)
    assert proc.returncode == 2 and "is a folder" in proc.stderr and proc.stdout == "", proc.stderr


def test_plot_to_a_fifo_is_refused_before_the_work(small_snapshot, tmp_path):
    fifo = tmp_path / "compare.png"
    os.mkfifo(fifo)
    proc = cli("compare", str(small_snapshot), "--plot", str(fifo), timeout=60)
    assert proc.returncode == 2 and "FIFO" in proc.stderr and proc.stdout == "", proc.stderr


# ------------------------------------------------------------------ item 3: the address space grows
@pytest.fixture(scope="module")
def many_streams(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("streams") / "streams.pickle"
    path.write_bytes(pickle.dumps(recorded_snapshot(streams=250, oom=False)))
    return path


@pytest.mark.parametrize("args", [["compare"], ["doctor"], ["compare", "--device-memory", "20000"],
                                  ["doctor", "--device-memory", "1048576"]])
def test_a_snapshot_with_many_streams_replays_under_every_design(many_streams, args):
    proc = cli(args[0], str(many_streams), *args[1:])
    assert proc.returncode in (0, 1) and "error" not in proc.stderr, proc.stderr
    assert "expandable_segments:True" in proc.stdout


def test_a_device_memory_beyond_the_bound_says_why():
    proc = cli("compare", "x.pickle", "--device-memory", "2000000")
    assert proc.returncode == 2 and "1,048,576" in proc.stderr and "address space" in proc.stderr, proc.stderr


def test_the_address_space_grows_around_a_range_claimed_beyond_it():
    from allocator_ref.device.sim.address_space import AddressSpace
    space = AddressSpace(0, 1 << 20)
    space.claim(3 << 20, 1 << 20)                 # a trace's address, outside the window
    got = [space.allocate(1 << 20, 1 << 20) for _ in range(5)]
    assert None not in got and (3 << 20) not in got and len(set(got)) == 5, got
    ranges = sorted(space.live_ranges())
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:])), ranges     # nothing handed out twice
    space.release(3 << 20)
    assert space.allocate(1 << 20, 1 << 20) == 3 << 20


# ------------------------------------------------------------------ item 4: a limit costs nothing up front
def test_a_snapshot_limit_above_the_machines_memory_still_loads_a_small_file(small_snapshot):
    proc = cli("replay", str(small_snapshot), env_extra={"ALLOCATOR_REF_MAX_SNAPSHOT_MB": str(2**39)})
    assert proc.returncode == 0, proc.stderr
    assert "peak reserved" in proc.stdout
