"""Maps each new page but never grants access: the first write to it is an illegal address."""
EXERCISE = "lab5.growable_buffer"
EXPECTED_REASON = "Call dev.mem_set_access(ptr, size) after dev.mem_map"


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
            h = self.dev.mem_create(self.g)
            self.dev.mem_map(self.ptr + len(self.handles) * self.g, self.g, h)   # no mem_set_access
            self.handles.append(h)

    def close(self):
        for i, h in enumerate(self.handles):
            self.dev.mem_unmap(self.ptr + i * self.g, self.g)
            self.dev.mem_release(h)
        self.handles = []
        self.dev.address_free(self.ptr, self.reserved)
