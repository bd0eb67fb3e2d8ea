"""The event is recorded after the copy, but x is freed before the host waits for it: for that while the
allocator can hand x's block to the next request on the default stream while the side stream still reads it."""
EXERCISE = "lab3.event"
EXPECTED_REASON = "unordered reuse"


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
    done = dev.create_event()
    done.record(side)
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, 0xEE)
    dev.sleep(None, work_us)
    alloc.free(x)                       # too early: the wait comes after
    done.synchronize()
    alloc.free(tmp)
    return out
