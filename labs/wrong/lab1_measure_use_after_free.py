"""Frees the buffer before the kernel that writes it: a use after free, an error on the device."""
from allocator_ref import CachingAllocator

EXERCISE = "lab1.measure"
EXPECTED_REASON = "your code raised"


def SUBMISSION(dev, nbytes, repeats, kernel_us):
    t0 = dev.now_us()
    for _ in range(repeats):
        ptr = dev.malloc(nbytes)
        dev.free(ptr)
        dev.fill(ptr, nbytes, 1)          # too late: ptr was freed
        dev.sleep(None, kernel_us)
    direct = (dev.now_us() - t0) / repeats
    alloc = CachingAllocator(dev)
    t0 = dev.now_us()
    for _ in range(repeats):
        buf = alloc.malloc(nbytes)
        dev.fill(buf.ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
        alloc.free(buf)
    cached = (dev.now_us() - t0) / repeats
    return {"direct_us": direct, "cached_us": cached, "ratio": direct / cached}
