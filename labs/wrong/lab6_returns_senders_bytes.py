"""Keeps the lifetime rule, but returns the sender's own bytes (read back from its device), not what the
receiver read: equal in value when all goes well, so only where the bytes came from tells them apart."""
EXERCISE = "lab6.lifetime"
EXPECTED_REASON = "not the bytes the receiver read"


def SUBMISSION(alloc, data, peer):
    from allocator_ref.sharing import share_block
    x = alloc.malloc(len(data))
    alloc.device.write(x.ptr, data)
    ref = peer.open(share_block(alloc, x))
    peer.read(ref, 0, len(data))           # the receiver reads... and its bytes are dropped
    peer.close(ref)
    mine = alloc.device.read(x.ptr, len(data))   # "it is the same memory" -- but it is not the answer
    alloc.free(x)
    return mine
