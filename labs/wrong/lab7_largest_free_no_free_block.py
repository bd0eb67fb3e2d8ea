"""max() with no default: crashes on a snapshot where every block is in use (the answer there is 0)."""
EXERCISE = "lab7.largest_free"
EXPECTED_REASON = "ValueError"


def SUBMISSION(snapshot):
    return max(b["size"] for seg in snapshot["segments"] for b in seg["blocks"] if b["state"] == "inactive")
