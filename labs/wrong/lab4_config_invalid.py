"""A config PyTorch would refuse (max_split_size_mb below large_segment_size)."""
EXERCISE = "lab4.config"
EXPECTED_REASON = "is not valid"


def SUBMISSION():
    return "max_split_size_mb:10"
