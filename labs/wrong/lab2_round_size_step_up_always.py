"""Rounds to the next division step even when the size already sits on one."""
EXERCISE = "lab2.round_size"
EXPECTED_REASON = "never add a whole step"


def SUBMISSION(size, config):
    if size < 512:
        return 512
    div = config.divisions_for(size)
    if div > 1 and size > 512 * div:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor // div
        return (size // step + 1) * step
    return -(-size // 512) * 512
