"""Sends the segment's handle but offset 0: the receiver reads the start of the segment."""
EXERCISE = "lab6.share_handle"
EXPECTED_REASON = "add the block's offset from its base"


def SUBMISSION(alloc, allocation):
    for seg in alloc.snapshot()["segments"]:
        base = seg["address"]
        if base <= allocation.ptr < base + seg["total_size"]:
            return {"ipc_handle": alloc.device.ipc_get_mem_handle(base), "offset": 0,
                    "size": allocation.requested_size}
    raise ValueError("no segment holds this allocation")
