"""IPC between two real OS processes (multiprocessing, spawn start method).

Each process opens its own device.  On the simulator the bytes cross through
shared memory (``/dev/shm`` for legacy handles, a memfd for VMM handles); on
a GPU through the driver.  The receiver-outlives-sender cases are
simulator-only: on a real GPU touching memory after the exporter freed it is
undefined behaviour, which is exactly what the simulator turns into a clear
error.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.reduction import recv_handle, send_handle

import pytest

from allocator_ref.device import CudaError, SimDevice
from allocator_ref.device.cuda import probe_cuda
from allocator_ref.device.sim.shared_segment import PREFIX, shm_dir

MiB = 1 << 20
KINDS = ["sim", pytest.param("cuda", marks=pytest.mark.gpu)]
TIMEOUT = 60
ctx = mp.get_context("spawn")


def _open(kind):
    if kind == "sim":
        return SimDevice("tiny-1gb")
    from allocator_ref.device.cuda import CudaDevice
    return CudaDevice(0)


def _leftover_segments(pid: int) -> list[str]:
    return sorted(p.name for p in shm_dir().glob(f"{PREFIX}{pid}-*"))


# --- code that runs in the other process -----------------------------------

def reader_process(kind, handle, conn):
    """Open the handle, read what the parent wrote, write an answer back."""
    dev = _open(kind)
    ptr = dev.ipc_open_mem_handle(handle)
    conn.send(dev.read(ptr, 11))
    dev.write(ptr + 100, b"from child")
    dev.synchronize()
    dev.ipc_close_mem_handle(ptr)
    dev.close()


def exporter_process(conn, how_it_ends):
    """Export an allocation, then free it, exit cleanly, or crash, when told to."""
    dev = SimDevice("tiny-1gb")
    p = dev.malloc(2 * MiB)
    dev.write(p, b"still here")
    dev.synchronize()
    conn.send(dev.ipc_get_mem_handle(p))
    conn.recv()                                # wait until the receiver has read once
    if how_it_ends == "free":
        dev.free(p)
        conn.send("freed")
        conn.recv()
    elif how_it_ends == "crash":
        os._exit(0)                            # no cleanup at all
    # "exit": returning runs the device's finalizer, like a normal interpreter exit


def vmm_importer_process(conn):
    """Receive a VMM shareable fd, map it, check the bytes, write back."""
    dev = SimDevice("tiny-1gb")
    fd = recv_handle(conn)
    g = dev.vmm_granularity()
    handle = dev.mem_import_fd(fd)
    os.close(fd)
    va = dev.address_reserve(2 * g)
    dev.mem_map(va, 2 * g, handle)
    dev.mem_set_access(va, 2 * g)
    conn.send(dev.read(va + g, 9))
    dev.write(va + 8, b"imported")
    dev.synchronize()
    dev.mem_unmap(va, 2 * g)
    dev.mem_release(handle)
    dev.address_free(va, 2 * g)
    dev.close()
    conn.send("done")


# --- the tests -----------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_ipc_write_in_one_process_read_in_another(kind):
    if kind == "cuda" and not probe_cuda()[0]:
        pytest.skip(f"no GPU: {probe_cuda()[1]}")
    dev = _open(kind)
    p = dev.malloc(4 * MiB)
    dev.write(p, b"from parent")
    dev.synchronize()
    handle = dev.ipc_get_mem_handle(p)
    assert isinstance(handle, bytes) and len(handle) == 64
    assert dev.ipc_get_mem_handle(p) == handle        # cheap, repeatable, same allocation
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=reader_process, args=(kind, handle, child_end))
    child.start()
    assert parent_end.poll(TIMEOUT), "the reader process did not answer"
    assert parent_end.recv() == b"from parent"
    child.join(TIMEOUT)
    assert child.exitcode == 0
    assert dev.read(p + 100, 10) == b"from child"       # written by the other process
    dev.free(p)
    if kind == "sim":
        assert _leftover_segments(os.getpid()) == []
    dev.close()


@pytest.mark.parametrize("how_it_ends", ["free", "exit", "crash"])
def test_receiver_outliving_the_sender_gets_a_clear_error(how_it_ends):
    dev = SimDevice("tiny-1gb")
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=exporter_process, args=(child_end, how_it_ends))
    child.start()
    assert parent_end.poll(TIMEOUT)
    handle = parent_end.recv()
    ptr = dev.ipc_open_mem_handle(handle)
    assert dev.ipc_open_mem_handle(handle) == ptr     # reopening: same pointer, counted
    assert dev.read(ptr, 10) == b"still here"
    parent_end.send("go")
    if how_it_ends == "free":
        assert parent_end.poll(TIMEOUT) and parent_end.recv() == "freed"
    else:
        child.join(TIMEOUT)
    with pytest.raises(CudaError) as err:
        dev.read(ptr, 10)
    assert err.value.name == "CUDA_ERROR_INVALID_CONTEXT"
    assert "the exporting process freed this allocation or exited" in str(err.value)
    with pytest.raises(CudaError, match="freed this allocation or exited"):
        dev.ipc_open_mem_handle(handle)             # a new open fails the same way
    dev.ipc_close_mem_handle(ptr)
    dev.ipc_close_mem_handle(ptr)
    if how_it_ends == "free":
        parent_end.send("bye")
    child.join(TIMEOUT)
    assert _leftover_segments(child.pid) == []       # nothing left in /dev/shm, even after a crash
    dev.close()


def test_vmm_shareable_fd_crosses_processes():
    dev = SimDevice("tiny-1gb")
    g = dev.vmm_granularity()
    h = dev.mem_create(2 * g)
    va = dev.address_reserve(2 * g)
    dev.mem_map(va, 2 * g, h)
    dev.mem_set_access(va, 2 * g)
    dev.write(va + g, b"vmm bytes")
    dev.synchronize()
    fd = dev.mem_export_fd(h)
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=vmm_importer_process, args=(child_end,))
    child.start()
    send_handle(parent_end, fd, child.pid)           # the fd itself travels (SCM_RIGHTS)
    os.close(fd)
    assert parent_end.poll(TIMEOUT)
    assert parent_end.recv() == b"vmm bytes"
    assert parent_end.recv() == "done"
    child.join(TIMEOUT)
    assert child.exitcode == 0
    assert dev.read(va + 8, 8) == b"imported"        # the importer wrote our physical memory
    dev.mem_unmap(va, 2 * g)
    dev.mem_release(h)
    dev.address_free(va, 2 * g)
    dev.close()


def test_close_retires_every_export():
    dev = SimDevice("tiny-1gb")
    ptrs = [dev.malloc(2 * MiB) for _ in range(3)]
    handles = [dev.ipc_get_mem_handle(p) for p in ptrs]
    assert len(_leftover_segments(os.getpid())) == 3
    other = SimDevice("tiny-1gb")                       # a second device in this process
    ptr = other.ipc_open_mem_handle(handles[0])
    dev.close()
    assert _leftover_segments(os.getpid()) == []
    with pytest.raises(CudaError, match="exporting process"):
        other.read(ptr, 4)
    with pytest.raises(CudaError):                     # the exporter itself cannot open its own handle
        SimDevice("tiny-1gb").ipc_open_mem_handle(handles[1])
    other.close()
