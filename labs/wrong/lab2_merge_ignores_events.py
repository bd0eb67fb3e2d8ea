"""Merges a neighbour that is still waiting for another stream's event (ignores event_count)."""
EXERCISE = "lab2.merge"
EXPECTED_REASON = "still pending on another stream's event"


def SUBMISSION(dst, src, pool):
    if src is None or src.allocated or src.mapped != dst.mapped:
        return 0
    if src.mapped:
        pool.remove(src)
    else:
        pool.remove_unmapped(src)
    if dst.prev is src:
        dst.ptr = src.ptr
        dst.prev = src.prev
        if dst.prev is not None:
            dst.prev.next = dst
    else:
        dst.next = src.next
        if dst.next is not None:
            dst.next.prev = dst
    dst.size += src.size
    return src.size
