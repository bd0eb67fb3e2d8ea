"""Right numbers, but ignores the device's free bytes when judging the cause."""
EXERCISE = "lab4.diagnose"
EXPECTED_REASON = "cause is 'fragmentation'"


def SUBMISSION(stats, snapshot, request, device_free):
    unallocated = stats["reserved_bytes.all.current"] - stats["allocated_bytes.all.current"]
    largest = max((b["size"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "inactive"),
                  default=0)
    return {"reserved_but_unallocated": unallocated, "largest_free_block": largest,
            "cause": "fragmentation" if unallocated >= request else "too much live memory"}
