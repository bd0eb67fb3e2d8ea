"""Allocates one buffer outside the loop: the direct loop never measures cudaMalloc."""
from allocator_ref import CachingAllocator

EXERCISE = "lab1.measure"
EXPECTED_REASON = "cudaMalloc call(s) for"


def SUBMISSION(dev, nbytes, repeats, kernel_us):
    ptr = dev.malloc(nbytes)
    t0 = dev.now_us()
    for _ in range(repeats):
        dev.fill(ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
    direct = (dev.now_us() - t0) / repeats
    dev.free(ptr)
    alloc = CachingAllocator(dev)
    t0 = dev.now_us()
    for _ in range(repeats):
        buf = alloc.malloc(nbytes)
        dev.fill(buf.ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
        alloc.free(buf)
    cached = (dev.now_us() - t0) / repeats
    return {"direct_us": direct, "cached_us": cached, "ratio": direct / cached}
