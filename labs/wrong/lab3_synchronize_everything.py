"""Correct bytes by synchronising the whole device before the free: the streams no longer overlap."""
EXERCISE = "lab3.record_stream"
EXPECTED_REASON = "the streams were serialised"


def SUBMISSION(dev, alloc, data, work_us):
    side = dev.create_stream()
    n = len(data)
    x = alloc.malloc(n)
    dev.write(x.ptr, data)
    uploaded = dev.create_event()
    uploaded.record(None)
    dev.wait_event(side, uploaded)
    out = alloc.malloc(n, stream=side)
    dev.sleep(side, work_us)
    dev.copy(out.ptr, x.ptr, n, stream=side)
    dev.synchronize()
    alloc.free(x)
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, 0xEE)
    dev.sleep(None, work_us)
    alloc.free(tmp)
    return out
