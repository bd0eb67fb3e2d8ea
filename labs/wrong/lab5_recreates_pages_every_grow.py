"""Rebuilds the whole mapping on every grow: unmaps the old pages without releasing them and
creates all pages again (the old handles leak and the bytes written before are lost)."""
EXERCISE = "lab5.growable_buffer"
EXPECTED_REASON = "re-created pages that were already mapped"


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
        need = -(-nbytes // self.g)
        if need <= len(self.handles):
            return
        for i in range(len(self.handles)):
            self.dev.mem_unmap(self.ptr + i * self.g, self.g)       # ...and forgets mem_release
        self.handles = []
        for i in range(need):
            h = self.dev.mem_create(self.g)
            self.dev.mem_map(self.ptr + i * self.g, self.g, h)
            self.dev.mem_set_access(self.ptr + i * self.g, self.g)
            self.handles.append(h)

    def close(self):
        for i, h in enumerate(self.handles):
            self.dev.mem_unmap(self.ptr + i * self.g, self.g)
            self.dev.mem_release(h)
        self.handles = []
        self.dev.address_free(self.ptr, self.reserved)
