"""Captures in the order given: right when the sizes already come largest first, wrong otherwise."""
EXERCISE = "lab8.capture_order"
EXPECTED_REASON = "reserve more than the best order"


def SUBMISSION(batch_sizes):
    return list(batch_sizes)
