"""Takes the first segment of the snapshot as the base: right only when the block is in the first segment."""
EXERCISE = "lab6.share_handle"
EXPECTED_REASON = "not simply the first one"


def SUBMISSION(alloc, allocation):
    seg = alloc.snapshot()["segments"][0]
    base = seg["address"]
    return {"ipc_handle": alloc.device.ipc_get_mem_handle(base),
            "offset": allocation.ptr - base,
            "size": allocation.requested_size}
