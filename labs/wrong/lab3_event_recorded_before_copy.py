"""The event is recorded on the side stream before the copy: waiting for it covers the side stream's
compute, not its read of x, so x is freed while the copy still runs."""
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
    done = dev.create_event()
    done.record(side)                   # too early: before the copy that reads x
    dev.copy(out.ptr, x.ptr, n, stream=side)
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, 0xEE)
    dev.sleep(None, work_us)
    done.synchronize()
    alloc.free(x)
    alloc.free(tmp)
    return out
