"""Tests max_split_size_mb in the expandable branch too: PyTorch's should_split (CUDACachingAllocator.cpp,
2.11) splits an expandable segment's block whenever 512 B or more remain, whatever max_split_size is."""
EXERCISE = "lab2.should_split"
EXPECTED_REASON = "disagrees with the reference on a block of this kind"


def SUBMISSION(block, size, expandable_active, config):
    remaining = block.size - size
    if block.pool.is_small:
        return remaining >= 512
    if expandable_active:
        return size < config.max_split_size and remaining >= 512
    return size < config.max_split_size and remaining > 1024 * 1024
