"""Looks at large-pool segments only: a free block in a small (2 MiB) segment is never the answer."""
EXERCISE = "lab7.largest_free"
EXPECTED_REASON = "largest inactive block"


def SUBMISSION(snapshot):
    return max((b["size"] for seg in snapshot["segments"] if seg["segment_type"] == "large"
                for b in seg["blocks"] if b["state"] == "inactive"), default=0)
