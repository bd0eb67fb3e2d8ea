"""Off by one: rounds exact multiples of 512 up by a whole step (512 -> 1024)."""
EXERCISE = "lab2.round_size"
EXPECTED_REASON = "already a multiple of 512"


def SUBMISSION(size, config):
    return (size // 512 + 1) * 512
