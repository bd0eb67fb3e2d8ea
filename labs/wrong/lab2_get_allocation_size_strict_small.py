"""Uses < instead of <= for the small pool: exactly 1 MiB gets a 20 MiB segment."""
EXERCISE = "lab2.get_allocation_size"
EXPECTED_REASON = "is <= 1 MiB (small pool)"
MiB = 1 << 20


def SUBMISSION(size, config):
    if size < MiB:
        return 2 * MiB
    if size < 10 * MiB:
        return config.large_segment_size
    return -(-size // (2 * MiB)) * (2 * MiB)
