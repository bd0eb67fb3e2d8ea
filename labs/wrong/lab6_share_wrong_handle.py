"""Finds the right segment for the offset, but names the first segment in the handle: the offset and size
look right, and the receiver opens another cudaMalloc allocation."""
EXERCISE = "lab6.share_handle"
EXPECTED_REASON = "handle"


def SUBMISSION(alloc, allocation):
    segments = alloc.snapshot()["segments"]
    for seg in segments:
        base = seg["address"]
        if base <= allocation.ptr < base + seg["total_size"]:
            return {"ipc_handle": alloc.device.ipc_get_mem_handle(segments[0]["address"]),
                    "offset": allocation.ptr - base,
                    "size": allocation.requested_size}
    raise ValueError("no segment holds the allocation")
