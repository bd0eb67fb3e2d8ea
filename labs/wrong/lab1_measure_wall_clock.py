"""Times the loops with the Python wall clock instead of the device's clock."""
import time

from allocator_ref import CachingAllocator

EXERCISE = "lab1.measure"
EXPECTED_REASON = "but the device's clock gives"


def SUBMISSION(dev, nbytes, repeats, kernel_us):
    t0 = time.perf_counter()
    for _ in range(repeats):
        ptr = dev.malloc(nbytes)
        dev.fill(ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
        dev.free(ptr)
    direct = (time.perf_counter() - t0) * 1e6 / repeats
    alloc = CachingAllocator(dev)
    t0 = time.perf_counter()
    for _ in range(repeats):
        buf = alloc.malloc(nbytes)
        dev.fill(buf.ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
        alloc.free(buf)
    cached = (time.perf_counter() - t0) * 1e6 / repeats
    return {"direct_us": direct, "cached_us": cached, "ratio": direct / cached}
