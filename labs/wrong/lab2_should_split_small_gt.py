"""In the small pool splits only when more than 512 B remain (PyTorch keeps a 512 B remainder)."""
EXERCISE = "lab2.should_split"
EXPECTED_REASON = "remaining 512 B >= 512 B"
MiB = 1 << 20


def SUBMISSION(block, size, expandable_active, config):
    remaining = block.size - size
    if block.pool.is_small or expandable_active:
        return remaining > 512
    return size < config.max_split_size and remaining > MiB
