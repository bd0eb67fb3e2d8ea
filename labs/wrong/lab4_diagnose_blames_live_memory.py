"""Reads reserved memory as live memory: always blames the workload's size."""
EXERCISE = "lab4.diagnose"
EXPECTED_REASON = "reserved_but_unallocated is"


def SUBMISSION(stats, snapshot, request, device_free):
    return {"reserved_but_unallocated": stats["reserved_bytes.all.current"],
            "largest_free_block": 0, "cause": "too much live memory"}
