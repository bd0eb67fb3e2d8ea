"""No check against the reservation: a grow past it creates a page, then mem_map fails (leaked handle)."""
EXERCISE = "lab5.growable_buffer"
EXPECTED_REASON = "raised but leaked physical memory"


class SUBMISSION:
    def __init__(self, dev, max_size):
        self.dev = dev
        self.g = dev.vmm_granularity()
        self.reserved = -(-max_size // self.g) * self.g
        self.ptr = dev.address_reserve(self.reserved)
        self.handles = []

    def grow(self, nbytes):
        while len(self.handles) * self.g < nbytes:
            addr = self.ptr + len(self.handles) * self.g
            h = self.dev.mem_create(self.g)
            self.dev.mem_map(addr, self.g, h)          # raises past the reservation: h is never released
            self.dev.mem_set_access(addr, self.g)
            self.handles.append(h)

    def close(self):
        for i, h in enumerate(self.handles):
            self.dev.mem_unmap(self.ptr + i * self.g, self.g)
            self.dev.mem_release(h)
        self.handles = []
        self.dev.address_free(self.ptr, self.reserved)
