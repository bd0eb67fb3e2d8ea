"""A setting that does not address fragmentation of split segments (rounding)."""
EXERCISE = "lab4.config"
EXPECTED_REASON = "still runs out of memory"


def SUBMISSION():
    return "roundup_power2_divisions:4"
