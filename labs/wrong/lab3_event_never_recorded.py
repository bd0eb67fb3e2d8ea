"""The host waits for an event that was never recorded: CUDA reports such an event complete at once, so
the wait orders nothing and x is freed while the side stream still reads it."""
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
    done = dev.create_event()           # never recorded
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, 0xEE)
    dev.sleep(None, work_us)
    done.synchronize()                  # returns at once
    alloc.free(x)
    alloc.free(tmp)
    return out
