"""tools/record_torch_snapshots.py: skips without torch+CUDA, and --verify replays a folder of snapshots.

The recording itself needs a GPU (``make gpu-check``); its output, once
committed under profiles/measured/torch-snapshots/, must replay at 100%.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from allocator_ref.caching import CachingAllocator
from allocator_ref.device import SimDevice
from allocator_ref.trace import load_snapshot, save_snapshot

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "record_torch_snapshots.py"
MiB = 1 << 20
sys.path.insert(0, str(ROOT / "tools"))
import record_torch_snapshots as rts  # noqa: E402


def _run(*args, env=None):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_recording_without_torch_cuda_skips_and_says_why(tmp_path):
    run = _run("--out", str(tmp_path / "snaps"), env={"CUDA_VISIBLE_DEVICES": ""})   # hide any GPU
    assert run.returncode == 0, run.stderr
    assert "skipped" in run.stdout and ("no CUDA GPU" in run.stdout or "not installed" in run.stdout)
    assert not (tmp_path / "snaps").exists()


def _course_snapshot(path: Path) -> Path:
    """The chapter 5 pattern plus a cross-stream free, recorded by our own CachingAllocator."""
    dev = SimDevice("h100-80gb")
    a = CachingAllocator(dev)
    a.record_memory_history(enabled="all")
    xs = [a.malloc(16 * MiB) for _ in range(8)]
    for x in xs:
        a.free(x)
    ys = [a.malloc(32 * MiB) for _ in range(4)]
    side = dev.create_stream()
    dev.sleep(side, 1000)
    a.record_stream(ys[0], side)
    a.free(ys[0])
    side.synchronize()
    a.malloc(32 * MiB)
    return save_snapshot(a.snapshot(), path)


def test_verify_replays_every_pickle_in_a_folder(tmp_path):
    _course_snapshot(tmp_path / "course.pickle")
    run = _run("--verify", str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "allocations at the recorded address: 13/13 (100.0%)" in run.stdout
    assert "1/1 snapshots replayed exactly" in run.stdout


def test_verify_fails_on_a_divergence_and_on_an_empty_folder(tmp_path):
    snap = load_snapshot(_course_snapshot(tmp_path / "good.pickle"))
    trace = snap["device_traces"][0]             # claim PyTorch put the first 16 MiB block 512 B further on
    first = next(e["addr"] for e in trace if e["action"] == "alloc" and e["size"] == 16 * MiB)
    for entry in trace:                          # its alloc and its free, consistently
        if entry["addr"] == first and entry["action"] in ("alloc", "free_requested", "free_completed"):
            entry["addr"] += 512
    save_snapshot(snap, tmp_path / "tampered.pickle")
    run = _run("--verify", str(tmp_path))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1/2 snapshots replayed exactly; diverged: tampered.pickle" in run.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run("--verify", str(empty)).returncode == 2


def test_the_output_folder_follows_OUT(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert rts.default_dir() == tmp_path / "torch-snapshots"
    monkeypatch.delenv("OUT")
    assert rts.default_dir() == ROOT / "allocator_ref/device/profiles/measured/torch-snapshots"


COMMITTED = sorted(rts.DEFAULT_DIR.glob("*.pickle")) if rts.DEFAULT_DIR.is_dir() else []


@pytest.mark.skipif(not COMMITTED, reason="no real torch snapshot committed yet: run make gpu-check on a GPU")
@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_committed_real_snapshots_replay_at_100_percent(path):
    from allocator_ref.trace.replay import replay
    result = replay(path, verify=True, progress=False)
    report = result.to_json()
    assert report["allocs"] > 0 and report["allocs_exact"] == report["allocs"], report["first_divergence"]
    assert result.perfect, (report["first_divergence"], [d.final_state_diff for d in result.devices])
