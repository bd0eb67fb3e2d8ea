"""The largest batch first, then the rest smallest first: right on some draws, not the full descending order."""
EXERCISE = "lab8.capture_order"
EXPECTED_REASON = "reserve more than the best order"


def SUBMISSION(batch_sizes):
    ordered = sorted(batch_sizes)
    return ordered[-1:] + ordered[:-1]
