"""Measure what the simulated device's cost model guesses, on a real GPU.

    python tools/gpu_measure.py            # writes allocator_ref/device/profiles/measured/<date>-<gpu>.json

Measures (host wall time, median of several runs, microseconds):
cudaMalloc/cudaFree by size (512 B .. 1 GiB) on an idle device and cudaFree
behind a queued 2 ms kernel; cudaMallocAsync pool hit and miss; each VMM
step per 2 MiB; pinned host alloc/register at 1 and 128 MiB; cudaIpcOpenMemHandle
(in a second process); cudaMemGetInfo; plus the granularity and the
context's share of memory.  Without a GPU it prints why and exits 0.

Every section is independent: one that fails records its error and the
others still run (the script gets one run on a borrowed GPU).
"""
from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocator_ref.device.cuda import probe_cuda  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [512, 4 * KiB, 64 * KiB, 1 * MiB, 2 * MiB, 16 * MiB, 128 * MiB, 1 * GiB]


def timed(fn, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args)
    return (time.perf_counter() - t0) * 1e6, out


def median_us(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


def malloc_free(dev) -> dict:
    result = {}
    for size in SIZES:
        reps = 3 if size >= 128 * MiB else 10
        m, f = [], []
        for _ in range(reps):
            t, p = timed(dev.malloc, size)
            m.append(t)
            f.append(timed(dev.free, p)[0])
        result[str(size)] = {"malloc_us": median_us(m), "free_us": median_us(f)}
    return result


def free_behind_kernel(dev) -> dict:
    s = dev.create_stream()
    waits = []
    for _ in range(5):
        p = dev.malloc(2 * MiB)
        dev.synchronize()
        dev.sleep(s, 2000)
        waits.append(timed(dev.free, p)[0])
    p = dev.malloc(2 * MiB)
    dev.synchronize()
    dev.sleep(s, 2000)
    malloc_behind = timed(dev.malloc, 2 * MiB)[0]
    dev.synchronize()
    dev.free(p)
    return {"queued_kernel_us": 2000, "free_2mib_us": median_us(waits),
            "malloc_2mib_behind_kernel_us": round(malloc_behind, 2)}


def async_pool(dev) -> dict:
    s = dev.create_stream()
    dev.mempool_set_release_threshold(2**63)
    hits, misses = [], []
    for _ in range(20):
        dev.mempool_trim_to(0)
        t, p = timed(dev.malloc_async, 2 * MiB, s)
        misses.append(t)
        dev.free_async(p, s)
        t, p = timed(dev.malloc_async, 2 * MiB, s)
        hits.append(t)
        dev.free_async(p, s)
        dev.synchronize()
    dev.mempool_set_release_threshold(0)
    # threshold 0: the naive alloc / free / sync loop
    loop = []
    for _ in range(20):
        t0 = time.perf_counter()
        dev.free_async(dev.malloc_async(2 * MiB, s), s)
        s.synchronize()
        loop.append((time.perf_counter() - t0) * 1e6)
    return {"hit_2mib_us": median_us(hits), "miss_2mib_us": median_us(misses),
            "alloc_free_sync_loop_threshold0_us": median_us(loop)}


def vmm_steps(dev) -> dict:
    g = dev.vmm_granularity()
    steps = {k: [] for k in ("reserve", "create", "map", "set_access", "unmap", "release", "address_free")}
    for _ in range(10):
        t, va = timed(dev.address_reserve, g)
        steps["reserve"].append(t)
        t, h = timed(dev.mem_create, g)
        steps["create"].append(t)
        steps["map"].append(timed(dev.mem_map, va, g, h)[0])
        steps["set_access"].append(timed(dev.mem_set_access, va, g)[0])
        steps["unmap"].append(timed(dev.mem_unmap, va, g)[0])
        steps["release"].append(timed(dev.mem_release, h)[0])
        steps["address_free"].append(timed(dev.address_free, va, g)[0])
    return {"granularity": g, **{f"{k}_per_2mib_us": median_us(v) for k, v in steps.items()}}


def pinned(dev) -> dict:
    result = {}
    for size in (1 * MiB, 128 * MiB):
        t, buf = timed(dev.host_alloc, size, True)
        result[f"host_alloc_{size >> 20}mib_us"] = round(t, 2)
        result[f"host_free_{size >> 20}mib_us"] = round(timed(dev.host_free, buf)[0], 2)
        data = bytearray(size)
        t, reg = timed(dev.host_register, data)
        result[f"host_register_{size >> 20}mib_us"] = round(t, 2)
        dev.host_unregister(reg)
    return result


def _ipc_child(handle, conn) -> None:
    from allocator_ref.device.cuda import CudaDevice
    dev = CudaDevice(0)
    t, ptr = timed(dev.ipc_open_mem_handle, handle)
    ok = dev.read(ptr, 4) == b"ipc!"
    dev.ipc_close_mem_handle(ptr)
    conn.send((t, ok))


def ipc_open(dev) -> dict:
    p = dev.malloc(2 * MiB)
    dev.write(p, b"ipc!")
    dev.synchronize()
    t_get, handle = timed(dev.ipc_get_mem_handle, p)
    ctx = mp.get_context("spawn")
    parent, child_end = ctx.Pipe()
    proc = ctx.Process(target=_ipc_child, args=(handle, child_end))
    proc.start()
    t_open, ok = parent.recv() if parent.poll(120) else (None, False)
    proc.join(60)
    dev.free(p)
    return {"get_handle_us": round(t_get, 2), "open_us": t_open and round(t_open, 2), "bytes_seen": ok}


def mem_info(dev) -> dict:
    samples = [timed(dev.mem_get_info)[0] for _ in range(50)]
    free0, total = dev.mem_get_info()
    p = dev.malloc(1)
    free1, _ = dev.mem_get_info()
    dev.free(p)
    return {"mem_get_info_us": median_us(samples), "total_memory": total,
            "used_at_open_bytes": dev.info.context_reserve, "free_delta_after_malloc_1_byte": free0 - free1}


def main() -> int:
    found, reason = probe_cuda()
    if not found:
        print(f"gpu_measure: skipped, {reason}")
        return 0
    from cuda.bindings import runtime

    from allocator_ref.device.cuda import CudaDevice
    dev = CudaDevice(0)
    err, rt_version = runtime.cudaRuntimeGetVersion()
    today = datetime.date.today().isoformat()
    out = {"date": today, "gpu": dev.info.name, "driver_version": dev.info.driver_version,
           "cuda_runtime_version": f"{rt_version // 1000}.{rt_version % 1000 // 10}",
           "units": "host wall time in microseconds, median of several runs", "results": {}}
    sections = [malloc_free, free_behind_kernel, async_pool, vmm_steps, pinned, ipc_open, mem_info]
    for section in sections:
        try:
            out["results"][section.__name__] = section(dev)
        except Exception as e:                          # keep going: one run on a borrowed GPU
            out["results"][section.__name__] = {"error": f"{type(e).__name__}: {e}"}
        print(f"{section.__name__}: {json.dumps(out['results'][section.__name__])}")
    slug = re.sub(r"[^a-z0-9]+", "-", dev.info.name.lower()).strip("-")
    path = ROOT / "allocator_ref" / "device" / "profiles" / "measured" / f"{today}-{slug}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"gpu_measure: wrote {path.relative_to(ROOT)}")
    dev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
