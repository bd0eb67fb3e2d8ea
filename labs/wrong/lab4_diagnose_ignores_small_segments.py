"""Looks for the largest free block in large-pool segments only, as if small (2 MiB) segments never held
a free block worth counting."""
EXERCISE = "lab4.diagnose"
EXPECTED_REASON = "largest_free_block"


def SUBMISSION(stats, snapshot, request, device_free):
    unallocated = stats["reserved_bytes.all.current"] - stats["allocated_bytes.all.current"]
    largest = max((b["size"] for s in snapshot["segments"] if s["segment_type"] == "large"
                   for b in s["blocks"] if b["state"] == "inactive"), default=0)
    return {"reserved_but_unallocated": unallocated, "largest_free_block": largest,
            "cause": "fragmentation" if unallocated + device_free >= request else "too much live memory"}
