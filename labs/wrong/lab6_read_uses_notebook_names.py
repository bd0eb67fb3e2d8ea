"""Uses a name from the sender's module: in the other process it does not exist."""
import struct  # noqa: F401  (imported here, but the receiver runs in another process)

EXERCISE = "lab6.read_shared"
EXPECTED_REASON = "import what you need inside the function"


def SUBMISSION(dev, handle):
    base = dev.ipc_open_mem_handle(handle["ipc_handle"])
    try:
        header = struct.pack("<Q", handle["offset"])          # NameError over there
        return dev.read(base + struct.unpack("<Q", header)[0], handle["size"])
    finally:
        dev.ipc_close_mem_handle(base)
