"""Gets the right bytes by writing `out` from the host instead of copying x on the side stream."""
EXERCISE = "lab3.record_stream"
EXPECTED_REASON = "written from the host"


def SUBMISSION(dev, alloc, data, work_us):
    side = dev.create_stream()
    n = len(data)
    x = alloc.malloc(n)
    dev.write(x.ptr, data)
    out = alloc.malloc(n, stream=side)
    dev.sleep(side, work_us)
    alloc.record_stream(x, side)
    alloc.free(x)
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, 0xEE)
    dev.sleep(None, work_us)
    alloc.free(tmp)
    dev.write(out.ptr, data, stream=side)       # the host hands over the answer: not what the device computed
    return out
