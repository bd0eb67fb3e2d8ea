"""Takes total_size - allocated_size of each segment: right only when a segment has one free block."""
EXERCISE = "lab7.largest_free"
EXPECTED_REASON = "the largest free block is"


def SUBMISSION(snapshot):
    return max((s["total_size"] - s["allocated_size"] for s in snapshot["segments"]), default=0)
