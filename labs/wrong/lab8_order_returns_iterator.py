"""The right order, as an iterator (reversed(sorted(...))): the README promises a list.  Before the type
check it passed: the judge's sorted(plan) used the iterator up, and capturing "nothing" reserves nothing."""
EXERCISE = "lab8.capture_order"
EXPECTED_REASON = "return a list of the batch sizes"
PUBLIC_CATCHES = True          # a wrong type fails the public cases too


def SUBMISSION(batch_sizes):
    return reversed(sorted(batch_sizes))
