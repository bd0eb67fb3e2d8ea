"""Takes the largest block of any state, allocated ones included."""
EXERCISE = "lab7.largest_free"
EXPECTED_REASON = "the largest free block is"


def SUBMISSION(snapshot):
    return max(b["size"] for s in snapshot["segments"] for b in s["blocks"])
