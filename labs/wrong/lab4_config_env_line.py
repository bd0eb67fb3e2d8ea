"""The right option, returned as a whole environment line: the check wants the value PyTorch parses."""
EXERCISE = "lab4.config"
EXPECTED_REASON = "return only its value"


def SUBMISSION():
    return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
