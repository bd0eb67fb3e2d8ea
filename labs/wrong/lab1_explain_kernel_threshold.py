"""Decides from the kernel length alone and never runs the loop: right for very short and very long
kernels, wrong where the buffer's size tips the balance (a large cudaMalloc costs more than a mid-length
kernel's wait)."""
EXERCISE = "lab1.explain"
EXPECTED_REASON = "your answer differs from what the device's counters show"


def SUBMISSION(dev, nbytes, kernel_us):
    return "sync" if kernel_us > 82 else "api"
