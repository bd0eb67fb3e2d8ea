"""Treats a block freed with a pending stream use as still allocated (empty_cache waits for it first)."""
EXERCISE = "lab9.stranded"
EXPECTED_REASON = "keeps a live block (stranded)"


def SUBMISSION(segments):
    total = 0
    for seg in segments:
        if any(b["state"] != "inactive" for b in seg["blocks"]):
            total += sum(b["size"] for b in seg["blocks"] if b["state"] == "inactive")
    return total
