"""Counts memory as released at free_requested and ignores segment_free: wrong peaks."""
EXERCISE = "lab7.peaks"
EXPECTED_REASON = "peak_reserved is"


def SUBMISSION(snapshot):
    requested = reserved = peak_req = peak_res = 0
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            requested += e["size"]
        elif e["action"] == "free_requested":
            requested -= e["size"]
        elif e["action"] == "segment_alloc":
            reserved += e["size"]
        peak_req, peak_res = max(peak_req, requested), max(peak_res, reserved)
    return {"peak_requested": peak_req, "peak_reserved": reserved + 1}
