"""Counts every free byte (reserved minus allocated), as if empty_cache() released nothing."""
EXERCISE = "lab9.stranded"
EXPECTED_REASON = "empty_cache releases"


def SUBMISSION(segments):
    return sum(b["size"] for seg in segments for b in seg["blocks"] if b["state"] != "active_allocated")
