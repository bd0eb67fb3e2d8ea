"""Calls it fragmentation only when the free bytes are MORE than the request (> where the rule has >=):
free bytes exactly equal to the request are enough."""
EXERCISE = "lab4.diagnose"
EXPECTED_REASON = "your cause differs"


def SUBMISSION(stats, snapshot, request, device_free):
    unallocated = stats["reserved_bytes.all.current"] - stats["allocated_bytes.all.current"]
    largest = max((b["size"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "inactive"),
                  default=0)
    return {"reserved_but_unallocated": unallocated, "largest_free_block": largest,
            "cause": "fragmentation" if unallocated + device_free > request else "too much live memory"}
