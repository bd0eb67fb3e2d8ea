"""Takes a division count of 1 as "one step between powers of two": rounds 3000 B to 4096 B.  PyTorch's
DeviceCachingAllocator::round_size (CUDACachingAllocator.cpp, 2.11) applies divisions only when
`divisions > 1`; with 1 (a valid power of two for roundup_power2_divisions) it keeps 512 B multiples."""
EXERCISE = "lab2.round_size"
EXPECTED_REASON = "roundup_power2_divisions:1"


def SUBMISSION(size, config):
    if size < 512:
        return 512
    div = config.divisions_for(size)
    if div >= 1 and size > 512 * div:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor // div
        return -(-size // step) * step
    return -(-size // 512) * 512
