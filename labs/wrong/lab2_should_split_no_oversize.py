"""Forgets max_split_size: splits oversize blocks too."""
EXERCISE = "lab2.should_split"
EXPECTED_REASON = "oversize blocks are never split"
MiB = 1 << 20


def SUBMISSION(block, size, expandable_active, config):
    remaining = block.size - size
    if block.pool.is_small or expandable_active:
        return remaining >= 512
    return remaining > MiB
