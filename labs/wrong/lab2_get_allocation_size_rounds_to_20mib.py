"""Rounds big requests up to a multiple of 20 MiB instead of 2 MiB."""
EXERCISE = "lab2.get_allocation_size"
EXPECTED_REASON = "rounded up to a 2 MiB multiple"
MiB = 1 << 20


def SUBMISSION(size, config):
    if size <= MiB:
        return 2 * MiB
    if size < 10 * MiB:
        return config.large_segment_size
    return -(-size // (20 * MiB)) * (20 * MiB)
