"""Uses 2 MiB pages instead of asking the device: right on today's GPUs, wrong on a device whose
VMM granularity is 4 MiB (the check uses one)."""
EXERCISE = "lab5.growable_buffer"
EXPECTED_REASON = "not a multiple of the 4 MiB granularity"

PAGE = 2 << 20


class SUBMISSION:
    def __init__(self, dev, max_size):
        self.dev = dev
        self.reserved = -(-max_size // PAGE) * PAGE
        self.ptr = dev.address_reserve(self.reserved)
        self.handles = []

    def grow(self, nbytes):
        if nbytes > self.reserved:
            raise ValueError(f"{nbytes} bytes do not fit in the {self.reserved}-byte reservation")
        while len(self.handles) * PAGE < nbytes:
            addr = self.ptr + len(self.handles) * PAGE
            h = self.dev.mem_create(PAGE)
            self.dev.mem_map(addr, PAGE, h)
            self.dev.mem_set_access(addr, PAGE)
            self.handles.append(h)

    def close(self):
        while self.handles:
            h = self.handles.pop()
            self.dev.mem_unmap(self.ptr + len(self.handles) * PAGE, PAGE)
            self.dev.mem_release(h)
        self.dev.address_free(self.ptr, self.reserved)
