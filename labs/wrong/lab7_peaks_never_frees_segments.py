"""Adds segments but never subtracts a freed one: reserved only grows."""
EXERCISE = "lab7.peaks"
EXPECTED_REASON = "segment_map"


def SUBMISSION(snapshot):
    requested = reserved = peak_requested = peak_reserved = 0
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            requested += e["size"]
        elif e["action"] == "free_completed":
            requested -= e["size"]
        elif e["action"] in ("segment_alloc", "segment_map"):
            reserved += e["size"]
        peak_requested = max(peak_requested, requested)
        peak_reserved = max(peak_reserved, reserved)
    return {"peak_requested": peak_requested, "peak_reserved": peak_reserved}
