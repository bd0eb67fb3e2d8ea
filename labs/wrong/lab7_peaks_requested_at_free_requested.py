"""Right in every respect but one: subtracts a tensor's bytes at 'free_requested', not 'free_completed'
(the mistake the lab text warns about: with record_stream the memory stays in use until the other
stream's event completes)."""
EXERCISE = "lab7.peaks"
EXPECTED_REASON = "peak_requested is"


def SUBMISSION(snapshot):
    requested = reserved = peak_req = peak_res = 0
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            requested += e["size"]
        elif e["action"] == "free_requested":
            requested -= e["size"]
        elif e["action"] in ("segment_alloc", "segment_map"):
            reserved += e["size"]
        elif e["action"] in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
        peak_req, peak_res = max(peak_req, requested), max(peak_res, reserved)
    return {"peak_requested": peak_req, "peak_reserved": peak_res}
