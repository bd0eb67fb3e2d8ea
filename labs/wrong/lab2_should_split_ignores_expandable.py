"""Ignores expandable_active: a block of an expandable segment is judged by the large pool's 1 MiB rule."""
EXERCISE = "lab2.should_split"
EXPECTED_REASON = "expandable segment"
MiB = 1 << 20


def SUBMISSION(block, size, expandable_active, config):
    remaining = block.size - size
    if block.pool.is_small:
        return remaining >= 512
    return size < config.max_split_size and remaining > MiB
