"""A free without record_stream: x's memory is reused while the side stream still has to read it."""
EXERCISE = "lab3.record_stream"
EXPECTED_REASON = "corrupted output"


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
    alloc.free(x)
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, 0xEE)
    dev.sleep(None, work_us)
    alloc.free(tmp)
    return out
