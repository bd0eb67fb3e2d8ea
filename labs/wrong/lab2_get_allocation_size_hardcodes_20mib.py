"""Hard-codes 20 MiB for mid-sized requests instead of the config's large segment size."""
EXERCISE = "lab2.get_allocation_size"
EXPECTED_REASON = "(large_segment_size)"
MiB = 1 << 20


def SUBMISSION(size, config):
    if size <= MiB:
        return 2 * MiB
    if size < 10 * MiB:
        return 20 * MiB
    return -(-size // (2 * MiB)) * (2 * MiB)
