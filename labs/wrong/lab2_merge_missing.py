"""A missing merge: freed blocks never absorb their free neighbours."""
EXERCISE = "lab2.merge"
EXPECTED_REASON = "should have merged with its neighbour"


def SUBMISSION(dst, src, pool):
    return 0
