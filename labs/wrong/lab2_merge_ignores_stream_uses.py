"""Checks event_count but not stream_uses: merges a neighbour whose free a capture held back (its recorded
stream use has no event yet, so event_count is still 0)."""
EXERCISE = "lab2.merge"
EXPECTED_REASON = "held back"


def SUBMISSION(dst, src, pool):
    if src is None or src.allocated or src.event_count > 0 or src.mapped != dst.mapped:
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
