"""record_stream on the wrong stream: x's own (default) stream, which the allocator ignores."""
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
    alloc.record_stream(x, dev.default_stream)
    alloc.free(x)
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, 0xEE)
    dev.sleep(None, work_us)
    alloc.free(tmp)
    return out
