"""PyTorch's own torch.cuda._memory_viz must read the reference allocator's snapshots.

Needs the optional CPU torch wheel (`pip install torch`, `make test` tries it); skipped,
with the reason, when torch is absent.
"""
import subprocess
import sys

import pytest

from allocator_ref.caching import CachingAllocator, check_stats_consistency
from allocator_ref.device import SimDevice
from allocator_ref.trace import save_snapshot

torch = pytest.importorskip("torch", reason="the optional torch CPU wheel is not installed")


@pytest.fixture()
def snapshot_file(tmp_path):
    a = CachingAllocator(SimDevice("h100-80gb"))
    a.record_memory_history(enabled="all")
    keep = [a.malloc(n) for n in (4, 5 * 2**20, 12 * 2**20 + 1, 700 * 1024, 30 * 2**20)]
    a.free(keep[1])
    a.free(keep[3])
    snap = a.snapshot()
    check_stats_consistency(snap["segments"], a.memory_stats())
    return save_snapshot(snap, tmp_path / "ours.pickle"), a


def _viz(*args):
    return subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_memory_viz_stats_reads_our_snapshot(snapshot_file):
    path, allocator = snapshot_file
    proc = _viz("stats", path)
    assert proc.returncode == 0, proc.stderr
    assert f"segments: {len(allocator.snapshot()['segments'])}" in proc.stdout
    # _memory_viz sums the blocks itself (and asserts they tile each segment): its totals
    # must be our allocator's memory_reserved() / memory_allocated().
    assert f"total_reserved: {allocator.memory_reserved() / 2**20:.1f}MiB" in proc.stdout
    assert f"total_allocated: {allocator.memory_allocated() / 2**20:.1f}MiB" in proc.stdout


def test_memory_viz_trace_lists_our_events(snapshot_file):
    path, _ = snapshot_file
    proc = _viz("trace", path)
    assert proc.returncode == 0, proc.stderr
    assert "alloc" in proc.stdout and "free" in proc.stdout


def test_memory_viz_segment_plot_writes_html(snapshot_file, tmp_path):
    path, _ = snapshot_file
    out = tmp_path / "segments.html"
    proc = _viz("segment_plot", path, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and out.stat().st_size > 1000
