"""max_split_size_mb above the big tensors' size: the big blocks are still split by the medium buffers."""
EXERCISE = "lab4.config"
EXPECTED_REASON = "still runs out of memory"


def SUBMISSION():
    return "max_split_size_mb:128"
