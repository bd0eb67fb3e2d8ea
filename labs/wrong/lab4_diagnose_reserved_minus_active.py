"""Reserved minus *active* bytes: right until a block is freed but still waits on a stream or a pool
keeps it, then it undercounts what the cache holds unallocated."""
EXERCISE = "lab4.diagnose"
EXPECTED_REASON = "your reserved_but_unallocated differs"


def SUBMISSION(stats, snapshot, request, device_free):
    unallocated = stats["reserved_bytes.all.current"] - stats["active_bytes.all.current"]
    largest = max((b["size"] for seg in snapshot["segments"] for b in seg["blocks"] if b["state"] == "inactive"),
                  default=0)
    cause = "fragmentation" if unallocated + device_free >= request else "too much live memory"
    return {"reserved_but_unallocated": unallocated, "largest_free_block": largest, "cause": cause}
