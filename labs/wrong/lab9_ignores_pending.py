"""Leaves out the pending-free blocks of a segment that stays: they are free once empty_cache() has waited."""
EXERCISE = "lab9.stranded"
EXPECTED_REASON = "keeps a live block (stranded)"


def SUBMISSION(segments):
    total = 0
    for seg in segments:
        if any(b["state"] == "active_allocated" for b in seg["blocks"]):
            total += sum(b["size"] for b in seg["blocks"] if b["state"] == "inactive")
    return total
