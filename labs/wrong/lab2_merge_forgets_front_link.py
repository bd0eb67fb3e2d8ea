"""Absorbs the block before it but leaves that block's predecessor pointing forward at the absorbed block."""
EXERCISE = "lab2.merge"
EXPECTED_REASON = "its .next = dst"


def SUBMISSION(dst, src, pool):
    if (src is None or src.allocated or src.event_count > 0 or src.stream_uses
            or src.mapped != dst.mapped):
        return 0
    if src.mapped:
        pool.remove(src)
    else:
        pool.remove_unmapped(src)
    if dst.prev is src:
        dst.ptr = src.ptr
        dst.prev = src.prev                 # forgot: dst.prev.next = dst
    else:
        dst.next = src.next
        if dst.next is not None:
            dst.next.prev = dst
    dst.size += src.size
    return src.size
