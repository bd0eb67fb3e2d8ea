"""Counts a block freed but still waiting for another stream's event as free."""
EXERCISE = "lab7.largest_free"
EXPECTED_REASON = "'inactive'"


def SUBMISSION(snapshot):
    return max((b["size"] for seg in snapshot["segments"] for b in seg["blocks"]
                if b["state"] != "active_allocated"), default=0)
