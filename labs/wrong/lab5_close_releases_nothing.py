"""close() only forgets its bookkeeping: the pages stay mapped, the handles and the range are kept."""
EXERCISE = "lab5.growable_buffer"
EXPECTED_REASON = "leak after close()"


class SUBMISSION:
    def __init__(self, dev, max_size):
        self.dev = dev
        self.g = dev.vmm_granularity()
        self.reserved = -(-max_size // self.g) * self.g
        self.ptr = dev.address_reserve(self.reserved)
        self.handles = []

    def grow(self, nbytes):
        if nbytes > self.reserved:
            raise ValueError(f"{nbytes} bytes do not fit in the {self.reserved}-byte reservation")
        while len(self.handles) * self.g < nbytes:
            addr = self.ptr + len(self.handles) * self.g
            h = self.dev.mem_create(self.g)
            self.dev.mem_map(addr, self.g, h)
            self.dev.mem_set_access(addr, self.g)
            self.handles.append(h)

    def close(self):
        self.dev.synchronize()
        self.handles = []            # nothing unmapped, released or freed
