"""A capture plan that sorts the batch sizes largest first but drops a size captured twice."""
EXERCISE = "lab8.capture_order"
EXPECTED_REASON = "not a reordering of the batch sizes"


def SUBMISSION(batch_sizes):
    return sorted(set(batch_sizes), reverse=True)
