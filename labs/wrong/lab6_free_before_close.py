"""Frees after the read but before the receiver closed the block."""
EXERCISE = "lab6.lifetime"
EXPECTED_REASON = "freed before the receiver closed it"


def SUBMISSION(alloc, data, peer):
    from allocator_ref.sharing import share_block
    x = alloc.malloc(len(data))
    alloc.device.write(x.ptr, data)
    ref = peer.open(share_block(alloc, x))
    got = peer.read(ref, 0, len(data))
    alloc.free(x)
    peer.close(ref)
    return got
