"""Keeps the block alive -- forever: correct bytes, but the block leaks."""
EXERCISE = "lab6.lifetime"
EXPECTED_REASON = "leak: the shared block is still allocated"


def SUBMISSION(alloc, data, peer):
    from allocator_ref.sharing import share_block
    x = alloc.malloc(len(data))
    alloc.device.write(x.ptr, data)
    ref = peer.open(share_block(alloc, x))
    got = peer.read(ref, 0, len(data))
    peer.close(ref)
    return got
