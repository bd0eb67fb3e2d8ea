"""Counts segment_alloc/segment_free only: misses the pages an expandable segment maps and unmaps."""
EXERCISE = "lab7.peaks"
EXPECTED_REASON = "segment_map"


def SUBMISSION(snapshot):
    requested = reserved = peak_requested = peak_reserved = 0
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            requested += e["size"]
        elif e["action"] == "free_completed":
            requested -= e["size"]
        elif e["action"] == "segment_alloc":
            reserved += e["size"]
        elif e["action"] == "segment_free":
            reserved -= e["size"]
        peak_requested = max(peak_requested, requested)
        peak_reserved = max(peak_reserved, reserved)
    return {"peak_requested": peak_requested, "peak_reserved": peak_reserved}
