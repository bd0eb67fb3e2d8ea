"""Treats a cross-stream free the same whether or not a MemPool is open elsewhere: right with no
pool open, wrong while one is (captures_underway is shared with graph capture, pytorch#175015)."""
EXERCISE = "lab8.cross_stream_free"
EXPECTED_REASON = "what free does differs from the allocator"


def SUBMISSION(uses, pools_open):
    if uses == 0:
        return "free_block", True
    return "insert_events", True
