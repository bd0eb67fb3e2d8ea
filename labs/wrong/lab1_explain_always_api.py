"""Assumes cudaMalloc's own cost always dominates, ignoring cudaFree's implicit synchronisation."""
EXERCISE = "lab1.explain"
EXPECTED_REASON = "expected 'sync'"


def SUBMISSION(dev, nbytes, kernel_us):
    return "api"
