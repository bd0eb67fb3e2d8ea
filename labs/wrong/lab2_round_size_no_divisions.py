"""Ignores roundup_power2_divisions: always rounds to 512 B multiples."""
EXERCISE = "lab2.round_size"
EXPECTED_REASON = "equal steps between powers of two"


def SUBMISSION(size, config):
    return max(512, -(-size // 512) * 512)
