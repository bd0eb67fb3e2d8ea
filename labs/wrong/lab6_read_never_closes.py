"""Reads the right bytes but never closes the IPC mapping on the receiver's device."""
EXERCISE = "lab6.read_shared"
EXPECTED_REASON = "left 1 IPC mapping(s) open"


def SUBMISSION(dev, handle):
    base = dev.ipc_open_mem_handle(handle["ipc_handle"])
    return dev.read(base + handle["offset"], handle["size"])
