"""Frees the block as soon as the receiver has opened it, before it reads: the receiver fails."""
EXERCISE = "lab6.lifetime"
EXPECTED_REASON = "SenderFreedError"


def SUBMISSION(alloc, data, peer):
    from allocator_ref.sharing import share_block
    x = alloc.malloc(len(data))
    alloc.device.write(x.ptr, data)
    ref = peer.open(share_block(alloc, x))
    alloc.free(x)                          # "the receiver has it now" -- it does not
    got = peer.read(ref, 0, len(data))
    peer.close(ref)
    return got
