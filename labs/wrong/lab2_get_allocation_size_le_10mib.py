"""Treats a request of exactly 10 MiB as mid-sized (a 20 MiB segment) instead of rounding it to 2 MiB."""
EXERCISE = "lab2.get_allocation_size"
EXPECTED_REASON = "10 MiB is >= 10 MiB"
MiB = 1 << 20


def SUBMISSION(size, config):
    if size <= MiB:
        return 2 * MiB
    if size <= 10 * MiB:
        return config.large_segment_size
    return 2 * MiB * ((size + 2 * MiB - 1) // (2 * MiB))
