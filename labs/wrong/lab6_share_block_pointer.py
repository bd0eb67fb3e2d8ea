"""Asks for an IPC handle of the block's own address: legacy IPC only names whole cudaMalloc
allocations, so the device refuses any block that is not at its segment's base."""
EXERCISE = "lab6.share_handle"
EXPECTED_REASON = "pass the base pointer"


def SUBMISSION(alloc, allocation):
    return {"ipc_handle": alloc.device.ipc_get_mem_handle(allocation.ptr), "offset": 0,
            "size": allocation.requested_size}
