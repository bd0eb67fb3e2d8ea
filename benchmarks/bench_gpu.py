"""On a real GPU: the same allocation-heavy CuPy workload on four allocators.

* ``cudaMalloc``      -- ``cupy.cuda.set_allocator(None)``: cudaMalloc/cudaFree per array;
* ``reference``       -- the reference caching allocator on a CudaDevice, plugged in
                          with :func:`allocator_ref.integrations.cupy.use`;
* ``cupy_pool``       -- CuPy's own ``MemoryPool``;
* ``cudaMallocAsync`` -- CuPy's ``MemoryAsyncPool`` (the driver's stream-ordered pool).

Plus the implicit synchronisation of ``cudaFree`` behind a queued kernel: the
host time of one cudaFree on an idle device and with a long kernel queued.

Without a GPU, :func:`run` prints why and writes a ``skipped`` result.
"""
from __future__ import annotations

import time
from typing import Optional

from .common import write_result


def _probe() -> tuple[bool, str]:
    try:
        from allocator_ref.device.cuda import probe_cuda
        return probe_cuda()
    except Exception as exc:                          # pragma: no cover
        return False, f"{type(exc).__name__}: {exc}"


def _workload(cupy, steps: int) -> float:
    """Arrays of changing sizes with temporaries every step; returns seconds (device synced)."""
    sizes = [1 << 10, 1 << 14, 3 << 16, 1 << 20, 5 << 20, 1 << 22]
    dev = cupy.cuda.Device()
    dev.synchronize()
    t0 = time.perf_counter()
    acc = cupy.zeros(1, dtype=cupy.float32)
    for i in range(steps):
        n = sizes[i % len(sizes)] + 4 * (i % 7)
        x = cupy.ones(n, dtype=cupy.float32)
        y = x * 2.0 + 1.0                            # two temporaries
        acc += y[:1]
        del x, y
    dev.synchronize()
    elapsed = time.perf_counter() - t0
    expected = 3.0 * steps
    if abs(float(acc[0]) - expected) > 1e-3 * expected:
        raise AssertionError(f"workload result {float(acc[0])} != {expected}")
    return elapsed


def _free_behind_kernel(dev, kernel_us: float) -> dict:
    """Host time of cudaFree on an idle device and behind a queued ``kernel_us`` kernel."""
    out = {}
    for label, queued in (("idle", 0.0), ("kernel_queued", kernel_us)):
        ptr = dev.malloc(1 << 20)
        dev.synchronize()
        if queued:
            dev.sleep(dev.default_stream, queued)
        t0 = time.perf_counter()
        dev.free(ptr)
        out[f"cudaFree_{label}_us"] = (time.perf_counter() - t0) * 1e6
        dev.synchronize()
    out["kernel_us"] = kernel_us
    out["implicit_sync"] = out["cudaFree_kernel_queued_us"] > 0.5 * kernel_us
    return out


def run(quick: bool = False, out_dir=None) -> dict:
    found, reason = _probe()
    if not found:
        print(f"[gpu] skipped: no GPU ({reason})", flush=True)
        payload = {"quick": quick, "skipped": f"no GPU: {reason}", "allocators": {}, "free_sync": None}
        write_result("gpu", payload, out_dir)
        return payload

    import cupy

    from allocator_ref.caching import CachingAllocator
    from allocator_ref.device.cuda import CudaDevice
    from allocator_ref.integrations.cupy import use

    steps = 200 if quick else 5000
    results: dict = {}
    previous = cupy.cuda.get_allocator()
    dev = CudaDevice(0)
    device_text = dev.describe()
    try:
        def timed(name: str, install, extra: Optional[dict] = None) -> None:
            try:
                cupy.cuda.set_allocator(install)
                _workload(cupy, 20)                       # warm up (kernels compiled, pools filled)
                s = _workload(cupy, steps)
                results[name] = {"seconds": s, "us_per_step": s / steps * 1e6, **(extra or {})}
            except Exception as exc:
                results[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            finally:
                cupy.cuda.set_allocator(previous)
            print(f"[gpu] {name:<16} {results[name]}", flush=True)

        timed("cudaMalloc", None)
        timed("cupy_pool", cupy.cuda.MemoryPool().malloc)
        try:
            timed("cudaMallocAsync", cupy.cuda.MemoryAsyncPool().malloc)
        except Exception as exc:
            results["cudaMallocAsync"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        ref = CachingAllocator(dev)
        try:
            with use(ref):
                _workload(cupy, 20)
                s = _workload(cupy, steps)
            stats = ref.memory_stats()
            results["reference"] = {"seconds": s, "us_per_step": s / steps * 1e6,
                                    "allocations": stats.get("allocation.all.allocated"),
                                    "segments": stats.get("segment.all.allocated"),
                                    "peak_reserved": ref.max_memory_reserved()}
        except Exception as exc:
            results["reference"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            ref.empty_cache()
        print(f"[gpu] reference        {results['reference']}", flush=True)
        try:
            free_sync = _free_behind_kernel(dev, 2_000.0 if quick else 20_000.0)
        except Exception as exc:
            free_sync = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(f"[gpu] cudaFree sync    {free_sync}", flush=True)
    finally:
        cupy.cuda.set_allocator(previous)
        dev.close()
    payload = {"quick": quick, "skipped": None, "device": device_text,
               "steps": steps, "allocators": results, "free_sync": free_sync}
    write_result("gpu", payload, out_dir)
    return payload


if __name__ == "__main__":
    run()
