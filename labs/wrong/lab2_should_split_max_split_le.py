"""Treats a request of exactly max_split_size as splittable (<= where PyTorch has <)."""
EXERCISE = "lab2.should_split"
EXPECTED_REASON = "disagrees with the reference on a block of this kind"
MiB = 1 << 20


def SUBMISSION(block, size, expandable_active, config):
    remaining = block.size - size
    if block.pool.is_small or expandable_active:
        return remaining >= 512
    return size <= config.max_split_size and remaining > MiB
