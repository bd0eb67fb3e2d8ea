"""Opens the segment and reads at the pointer open returned, without adding the offset."""
EXERCISE = "lab6.read_shared"
EXPECTED_REASON = "the block starts at base + offset"


def SUBMISSION(dev, handle):
    base = dev.ipc_open_mem_handle(handle["ipc_handle"])
    data = dev.read(base, handle["size"])
    dev.ipc_close_mem_handle(base)
    return data
