"""Synchronises the device before each free, so cudaFree never waits and the counters say 'api'."""
EXERCISE = "lab1.explain"
EXPECTED_REASON = "dominant_cost returned"


def SUBMISSION(dev, nbytes, kernel_us):
    api0, wait0 = dev.counters.api_time_us, dev.counters.implicit_sync_wait_us
    for _ in range(5):
        ptr = dev.malloc(nbytes)
        dev.fill(ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
        dev.synchronize()              # waits here, where the counters do not look
        dev.free(ptr)
    api = dev.counters.api_time_us - api0
    wait = dev.counters.implicit_sync_wait_us - wait0
    return "sync" if wait > api else "api"
