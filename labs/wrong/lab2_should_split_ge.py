"""Splits on >= 1 MiB remaining instead of > 1 MiB."""
EXERCISE = "lab2.should_split"
EXPECTED_REASON = "must not split: remaining 1 MiB is not > 1 MiB"
MiB = 1 << 20


def SUBMISSION(block, size, expandable_active, config):
    remaining = block.size - size
    if block.pool.is_small or expandable_active:
        return remaining >= 512
    return size < config.max_split_size and remaining >= MiB
