"""Links the blocks together but leaves the absorbed block in the pool's free set."""
EXERCISE = "lab2.merge"
EXPECTED_REASON = "still in the pool of free blocks"


def SUBMISSION(dst, src, pool):
    if (src is None or src.allocated or src.event_count > 0 or src.stream_uses
            or src.mapped != dst.mapped):
        return 0
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
