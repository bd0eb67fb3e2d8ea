"""Avoids the race by never freeing x: correct and overlapping, but it leaks."""
EXERCISE = "lab3.event"
EXPECTED_REASON = "leak"


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
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, 0xEE)
    dev.sleep(None, work_us)
    alloc.free(tmp)
    return out
