"""Counts only the non-releasable bytes (inactive_split_bytes: free blocks inside split segments) as
reserved but unallocated, leaving out free blocks that fill a whole segment."""
EXERCISE = "lab4.diagnose"
EXPECTED_REASON = "reserved_but_unallocated"


def SUBMISSION(stats, snapshot, request, device_free):
    unallocated = stats["inactive_split_bytes.all.current"]
    largest = max((b["size"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "inactive"),
                  default=0)
    return {"reserved_but_unallocated": unallocated, "largest_free_block": largest,
            "cause": "fragmentation" if unallocated + device_free >= request else "too much live memory"}
