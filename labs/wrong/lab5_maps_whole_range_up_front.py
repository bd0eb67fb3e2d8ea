"""Creates and maps the whole reservation in __init__: correct bytes, but no memory is saved."""
EXERCISE = "lab5.growable_buffer"
EXPECTED_REASON = "__init__ mapped the whole range up front"


class SUBMISSION:
    def __init__(self, dev, max_size):
        self.dev = dev
        g = dev.vmm_granularity()
        self.reserved = -(-max_size // g) * g
        self.ptr = dev.address_reserve(self.reserved)
        self.handle = dev.mem_create(self.reserved)
        dev.mem_map(self.ptr, self.reserved, self.handle)
        dev.mem_set_access(self.ptr, self.reserved)

    def grow(self, nbytes):
        if nbytes > self.reserved:
            raise ValueError(f"{nbytes} bytes do not fit in the {self.reserved}-byte reservation")

    def close(self):
        self.dev.mem_unmap(self.ptr, self.reserved)
        self.dev.mem_release(self.handle)
        self.dev.address_free(self.ptr, self.reserved)
