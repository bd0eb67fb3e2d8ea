"""Adds up the free blocks of each segment and returns the biggest sum: two free blocks of one segment
are not one block (they are not contiguous, or they would have merged)."""
EXERCISE = "lab7.largest_free"
EXPECTED_REASON = "'inactive'"


def SUBMISSION(snapshot):
    return max((sum(b["size"] for b in seg["blocks"] if b["state"] == "inactive")
                for seg in snapshot["segments"]), default=0)
