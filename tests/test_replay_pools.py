"""Replay keeps private-pool routing (allocator_ref/trace/replay_pools.py): a snapshot recorded with
MemPools and a CUDA graph live replays address for address with every segment back in its pool, also
when the trace entries carry no ``pool_id`` (the address tells), and opens in torch's _memory_viz."""
from __future__ import annotations

import copy
import pickle

import pytest

import allocator_ref as ar
from allocator_ref.device import SimDevice
from allocator_ref.trace import load_snapshot, save_snapshot
from allocator_ref.trace.replay import replay

MiB = 1 << 20


def pooled_run():
    """Default-pool and pool requests interleaved; frees in both; a graph captured into a shared pool."""
    a = ar.CachingAllocator(SimDevice("h100-80gb"))
    a.record_memory_history(enabled="all")
    pool = ar.MemPool(a)
    keep = [a.malloc(6 * MiB)]
    with a.use_mem_pool(pool):
        p1 = a.malloc(6 * MiB)
        keep.append(a.malloc(300 * 1024))
        p2 = a.malloc(9 * MiB)
    keep.append(a.malloc(3 * MiB))
    a.free(p1)
    with a.use_mem_pool(pool):
        keep.append(a.malloc(5 * MiB))                  # reuses p1's block inside the pool
    a.free(p2)
    s = a.device.create_stream()
    g = ar.CUDAGraph(a)
    g.capture_begin(s)
    t = a.malloc(12 * MiB, s)
    keep.append(a.malloc(2 * MiB, s))
    a.free(t)
    g.capture_end()
    keep.append(a.malloc(12 * MiB))                     # eager: cannot use the graph's free 12 MiB
    return a, a.snapshot(), (pool, g, keep)


def test_pooled_snapshot_has_three_pools():
    a, snap, _keep = pooled_run()
    ids = {s["segment_pool_id"] for s in snap["segments"]}
    assert len(ids) == 3 and (0, 0) in ids
    assert any(e.get("pool_id", (0, 0)) != (0, 0) for e in snap["device_traces"][0] if e["action"] == "alloc")


@pytest.mark.parametrize("strip_trace_pool_ids", [False, True])
def test_verify_replay_keeps_pool_routing(strip_trace_pool_ids):
    a, snap, _keep = pooled_run()
    if strip_trace_pool_ids:        # like torch 2.11's pickles: only segments say which pool
        snap = copy.deepcopy(snap)
        for e in snap["device_traces"][0]:
            e.pop("pool_id", None)
    report = replay(snap, verify=True, progress=False).to_json()
    assert report["first_divergence"] is None
    assert report["allocs_exact"] == report["allocs"] == 9
    assert report["final_state_equal"] is True            # pool ids are part of the compared layout


def test_without_routing_the_replay_diverges():
    """The routing is what makes it exact: drop every pool id and the replay disagrees."""
    a, snap, _keep = pooled_run()
    snap = copy.deepcopy(snap)
    for e in snap["device_traces"][0]:
        e.pop("pool_id", None)
    for s in snap["segments"]:
        s["segment_pool_id"] = (0, 0)
    report = replay(snap, verify=True, progress=False).to_json()
    assert report["first_divergence"] is not None or report["final_state_equal"] is False


def test_what_if_replay_keeps_pools_under_another_config():
    a, snap, _keep = pooled_run()
    w = replay(snap, config="max_split_size_mb:200", progress=False).to_json()
    assert w["allocs"] == 9 and w["ooms_raised"] == 0
    assert w["peak_reserved"] >= a.memory_reserved()   # the pools still hold their own segments


def test_pooled_snapshot_opens_in_torchs_memory_viz(tmp_path):
    """torch.cuda._memory_viz (the CPU wheel's own module) reads the saved snapshot; pool ids intact."""
    mv = pytest.importorskip("torch.cuda._memory_viz")
    a, snap, _keep = pooled_run()
    path = save_snapshot(snap, tmp_path / "pools.pickle")
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[1] == 4                                    # protocol 4: MemoryViz.js reads 2-4
    data = pickle.loads(raw)
    ids = sorted({tuple(s["segment_pool_id"]) for s in data["segments"]})
    assert ids == sorted({s["segment_pool_id"] for s in snap["segments"]})
    text = mv.segsum(data)                                # `python -m torch.cuda._memory_viz stats`
    # _memory_viz sums the blocks of every segment itself, private pools included
    assert f"segments: {len(snap['segments'])}" in text
    assert f"total_reserved: {a.memory_reserved() / MiB:.1f}MiB" in text
    assert f"total_allocated: {a.memory_allocated() / MiB:.1f}MiB" in text
    html = mv.trace_plot(data)                            # the browser viewer's page, data embedded
    assert "MemoryViz" in html
    assert load_snapshot(path)["segments"] == snap["segments"]


def test_cli_says_which_pools_it_kept(tmp_path):
    """``python -m allocator_ref replay --verify``: the text names the pools; --json counts the routed requests."""
    import json
    import subprocess
    import sys
    a, snap, _keep = pooled_run()
    path = save_snapshot(snap, tmp_path / "pools.pickle")
    private = sorted({s["segment_pool_id"] for s in snap["segments"]} - {(0, 0)})
    text = subprocess.run([sys.executable, "-m", "allocator_ref", "replay", str(path), "--verify"],
                          capture_output=True, text=True, check=True).stdout
    assert f"private pools kept: {', '.join(map(str, private))} (6 requests routed into them)" in text
    report = json.loads(subprocess.run([sys.executable, "-m", "allocator_ref", "replay", str(path), "--verify",
                                        "--json"], capture_output=True, text=True, check=True).stdout)
    assert report["pool_requests"] == 6                  # 4 in the MemPool, 2 during the capture
    assert [tuple(p) for p in report["pools"]] == private


def test_mid_run_pooled_trace_rebuilds_its_pools():
    """History turned on after a MemPool already held segments: restore_segment puts them back
    into that pool (pool id from the final segments), so the rest replays exactly."""
    a = ar.CachingAllocator(SimDevice("h100-80gb"))
    pool = ar.MemPool(a)
    with a.use_mem_pool(pool):
        early = [a.malloc(6 * MiB), a.malloc(300 * 1024)]
    a.record_memory_history(enabled="all")
    a.free(early[0])
    with a.use_mem_pool(pool):
        late = [a.malloc(5 * MiB), a.malloc(2 * MiB)]      # reuse the pool's free 20 MiB segment
    other = a.malloc(5 * MiB)                              # default pool: a new segment
    snap = a.snapshot()
    report = replay(snap, verify=True, progress=False).to_json()
    assert any("existed before recording" in note for note in report["inferred"])
    assert report["first_divergence"] is None
    assert report["allocs_exact"] == report["allocs"] == 3
    assert report["final_state_equal"] is True
    for x in [early[1], other] + late:
        a.free(x)
