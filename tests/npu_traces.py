"""Course-made torch_npu snapshots: the NPU mirror records a run, shaped as torch_npu writes it.

No public snapshot recorded with torch_npu was found (searched: the Ascend/pytorch repository and its
tests, GitHub code and issues), so these stand in for them, one per rule that differs from CUDA.
``torch_npu_shape`` writes what ``THNPModule_memorySnapshot`` (torch_npu/csrc/npu/Module.cpp,
Ascend/pytorch v2.11.0-26.1.0) writes: ``segments`` and ``device_traces`` only (no
``allocator_settings``), trace entries with action/addr/size/stream/frames (no ``time_us``), the
default stream as a real aclrtStream pointer (NPUStream.cpp), and, when asked, the workspace
allocator's buffer: at the front of the trace the three entries NPUWorkspaceAllocator.cpp's
``get_trace`` writes for it (workspace_snapshot, segment_alloc, alloc), and its segment.
"""
from allocator_ref.caching.npu import NPUCachingAllocator
from allocator_ref.device import open_device

MiB = 1 << 20
ACL_STREAM = 0xAAAAE3C1B2D0      # what an aclrtStream pointer looks like (a heap address on aarch64)


def record(workload, config=""):
    """``workload(allocator)`` run on the NPU mirror with history on; its snapshot (course format)."""
    npu = NPUCachingAllocator(open_device("sim"), config)
    npu.record_memory_history()
    workload(npu)
    return npu.snapshot()


def torch_npu_shape(snap, workspace=False):
    """``snap`` as torch_npu's ``_snapshot()`` would have returned it."""
    def stream(s):
        return ACL_STREAM if s == 0 else s
    segments = [{**seg, "stream": stream(seg["stream"])} for seg in snap["segments"]]
    traces = [[{k: (stream(v) if k == "stream" and e["action"] != "snapshot" else v) for k, v in e.items()
                if k in ("action", "addr", "device_free", "size", "stream", "frames")} for e in trace]
              for trace in snap["device_traces"]]
    if workspace:                 # NPUWorkspaceAllocator: one 2 MiB-rounded buffer per stream
        address, size = 0x12C0C0000000, 4 * MiB
        traces[0][:0] = [{"action": action, "addr": address, "size": size, "stream": ACL_STREAM, "frames": []}
                         for action in ("workspace_snapshot", "segment_alloc", "alloc")]
        segments.append({"device": 0, "address": address, "total_size": size, "allocated_size": 0,
                         "active_size": 0, "requested_size": 0, "stream": ACL_STREAM, "segment_type": "large",
                         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                         "blocks": [{"address": address, "size": size, "requested_size": 3 * MiB,
                                     "state": "inactive", "frames": []}]})
    return {"segments": segments, "device_traces": traces}


# ---- one workload per rule that differs -----------------------------------------------------
def padded_requests(a):
    """Multiples of 512 and sizes just short of one: each takes 512 B more than on CUDA."""
    held = [a.malloc(n) for n in (512, 1024, 4096, 500, 100, 2048, 8192, 512, 300)]
    for x in held[::2]:
        a.free(x)
    held += [a.malloc(n) for n in (1536, 512, 700)]


def near_16k_alignment(a):
    """Large requests in an expandable segment whose ends fall off the 16 KiB grid."""
    held = [a.malloc(n) for n in (MiB + MiB // 2 + 512, 3 * MiB, 2 * MiB + 100, 5 * MiB - 512)]
    a.free(held[1])
    held.append(a.malloc(2 * MiB + 16384))
    a.free(held[0])
    held.append(a.malloc(3 * MiB + 512))


def expandable_growth(a):
    """One segment per pool that grows page by page, then gives pages back."""
    held = [a.malloc(7 * MiB) for _ in range(8)] + [a.malloc(3000) for _ in range(5)]
    for x in held[2:6]:
        a.free(x)
    a.empty_cache()
    held.append(a.malloc(30 * MiB))


RUNS = {
    "padded-requests": (padded_requests, ""),
    "near-16k-alignment": (near_16k_alignment, "expandable_segments:True"),
    "expandable-growth": (expandable_growth, "expandable_segments:True"),
}
