"""CUDA virtual memory management on the simulated device: the "three steps".

Four separate objects, as in CUDA (the Driver API's virtual memory management, cuMem*):

1. a **virtual range**   -- ``address_reserve`` (cuMemAddressReserve): addresses only, no memory;
2. a **physical handle** -- ``mem_create`` (cuMemCreate): memory, counted against capacity, no address;
3. a **mapping**         -- ``mem_map`` (cuMemMap): handle bytes appear at an address in a reservation;
4. **access rights**     -- ``mem_set_access`` (cuMemSetAccess): until then any touch is an illegal address.

Rules enforced, with the error CUDA reports:

* sizes, addresses and offsets must be multiples of the 2 MiB granularity
  (CUDA_ERROR_INVALID_VALUE);
* mem_map must land inside one reservation (CUDA_ERROR_INVALID_VALUE: "map
  before reserve") and on addresses not already mapped (CUDA_ERROR_ALREADY_MAPPED);
* mem_unmap must cover whole mappings; unmapping a range that is not mapped
  gives CUDA_ERROR_INVALID_VALUE (cuMemUnmap's documented error list has no
  "not mapped" code, so that is what the driver returns);
* **mem_release of a handle that is still mapped is allowed**: the CUDA docs
  for cuMemRelease say "the memory allocation will be freed when all
  outstanding mappings to the memory are unmapped", so the handle id dies at
  once but the memory (and its bytes, still visible through the mapping) stays
  counted until the last mem_unmap.  PyTorch's expandable segments rely on it.

Bytes belong to the physical handle: map one handle at two addresses and both
show the same bytes.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..errors import cuda_error
from .backing import LazyPages
from .checks import check_aligned, check_ptr, check_size
from .pagetable import Mapping


@dataclass
class PhysicalHandle:
    """What cuMemCreate returns (CUmemGenericAllocationHandle), with its bytes."""

    id: int
    size: int
    storage: object                 # LazyPages, or FlatBuffer over a memfd once exported
    charged: bool = True            # False for an imported handle: the memory is the exporter's
    released: bool = False          # cuMemRelease was called
    mappings: set = field(default_factory=set)   # start addresses where it is mapped
    fd: int = -1                    # the memfd behind it once exported/imported
    mmap: object = None

    # The page table reads and writes through the handle, so that exporting
    # (which swaps ``storage`` for shared memory) is invisible to mappings.
    def read(self, offset, nbytes):
        return self.storage.read(offset, nbytes)

    def write(self, offset, data):
        self.storage.write(offset, data)

    def fill(self, offset, nbytes, value):
        self.storage.fill(offset, nbytes, value)


class VmmCalls:
    """The cuMem* half of SimDevice (mixed into SimDevice)."""

    def _init_vmm(self) -> None:
        self._reservations: dict[int, int] = {}          # start -> size
        self._handles: dict[int, PhysicalHandle] = {}    # live handle ids
        self._handle_ids = itertools.count(0x1000)
        self._dying: list[PhysicalHandle] = []           # released but still mapped

    def vmm_granularity(self) -> int:
        """cuMemGetAllocationGranularity(MINIMUM): 2 MiB."""
        return self.info.vmm_granularity

    def _vmm_size(self, size, call: str) -> int:
        check_size(size, call, "CUDA_ERROR_INVALID_VALUE")
        check_aligned(size, self.info.vmm_granularity, "size", call)
        return size

    # --- 1. virtual ranges --------------------------------------------------
    def address_reserve(self, size: int, alignment: int = 0) -> int:
        """cuMemAddressReserve: a range of addresses, no memory behind it."""
        self._vmm_size(size, "address_reserve")
        gran = self.info.vmm_granularity
        if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 0 \
                or (alignment and (alignment & (alignment - 1) or alignment % gran)):
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"address_reserve: alignment must be 0 or a "
                             f"power of two multiple of {gran}, got {alignment!r}")
        self._check_open()
        self.counters.vmm_calls += 1
        self._spend(self.costs.vmm_reserve_us())
        start = self._place("reserve", size, max(alignment, gran), "address_reserve")
        if start % gran:
            self._space.release(start)
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"address_reserve: hinted address {start:#x} "
                             "is not granularity aligned")
        self._reservations[start] = size
        return start

    def address_free(self, ptr: int, size: int) -> None:
        """cuMemAddressFree: give back a whole reservation; nothing may still be mapped in it."""
        check_ptr(ptr, "address_free", "CUDA_ERROR_INVALID_VALUE")
        self._check_open()
        if self._reservations.get(ptr) != size:
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"address_free({ptr:#x}, {size!r}): not a "
                             "reservation made by address_reserve with exactly this size")
        if self._pages.overlapping(ptr, size):
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"address_free({ptr:#x}): the reservation "
                             "still has mappings; mem_unmap them first")
        self.counters.vmm_calls += 1
        self._spend(self.costs.vmm_address_free_us())
        del self._reservations[ptr]
        self._space.release(ptr)

    def _reservation_holding(self, ptr: int, size: int):
        """The (start, size) of the reservation containing [ptr, ptr+size), or None."""
        inside = self._space.containing(ptr)
        if inside is None or inside[0] not in self._reservations:
            return None
        start = inside[0]
        return (start, self._reservations[start]) if ptr + size <= inside[1] else None

    # --- 2. physical handles ---------------------------------------------
    def mem_create(self, size: int) -> int:
        """cuMemCreate: physical memory (counted against capacity) with no address yet."""
        self._vmm_size(size, "mem_create")
        self._check_open()
        self.counters.vmm_calls += 1
        self._spend(self.costs.vmm_create_us(size))
        self._charge(size, "CUDA_ERROR_OUT_OF_MEMORY", "cuMemCreate")
        handle = PhysicalHandle(next(self._handle_ids), size, LazyPages(size))
        self._handles[handle.id] = handle
        return handle.id

    def _live_handle(self, handle, call: str) -> PhysicalHandle:
        h = self._handles.get(handle) if isinstance(handle, int) else None
        if h is None:
            raise cuda_error("CUDA_ERROR_INVALID_HANDLE", f"{call}: {handle!r} is not a live physical "
                             "handle of this device (never created, or already released)")
        return h

    def mem_release(self, handle: int) -> None:
        """cuMemRelease.  If still mapped, the memory lives on until the last mem_unmap (as in CUDA)."""
        h = self._live_handle(handle, "mem_release")
        self.counters.vmm_calls += 1
        self._spend(self.costs.vmm_release_us(h.size))
        del self._handles[h.id]
        h.released = True
        if h.mappings:
            self._dying.append(h)          # freed by the last mem_unmap
        else:
            self._destroy_handle(h)

    def _destroy_handle(self, h: PhysicalHandle) -> None:
        if h.charged:
            self._uncharge(h.size)
        if h in self._dying:
            self._dying.remove(h)
        self._close_handle_fd(h)
        h.storage = None

    # --- 3. mappings --------------------------------------------------------
    def mem_map(self, ptr: int, size: int, handle: int, offset: int = 0) -> None:
        """cuMemMap: show ``size`` bytes of ``handle`` (from ``offset``) at ``ptr``; no access yet."""
        check_ptr(ptr, "mem_map", "CUDA_ERROR_INVALID_VALUE")
        self._vmm_size(size, "mem_map")
        gran = self.info.vmm_granularity
        check_aligned(ptr, gran, "address", "mem_map")
        h = self._live_handle(handle, "mem_map")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"mem_map: offset must be an int >= 0, got {offset!r}")
        check_aligned(offset, gran, "offset", "mem_map")
        if offset + size > h.size:
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"mem_map: offset {offset} + size {size} is past "
                             f"the end of the {h.size}-byte handle")
        if self._reservation_holding(ptr, size) is None:
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"mem_map({ptr:#x}, {size}): the range is not "
                             "inside one address_reserve reservation (reserve before you map)")
        if self._pages.overlapping(ptr, size):
            raise cuda_error("CUDA_ERROR_ALREADY_MAPPED", f"mem_map({ptr:#x}, {size}): part of this range "
                             "is already mapped; mem_unmap it first")
        self.counters.vmm_calls += 1
        self._spend(self.costs.vmm_map_us(size))
        self._pages.add(Mapping(ptr, size, h, offset, accessible=False, kind="vmm"))
        h.mappings.add(ptr)

    def _whole_mappings(self, ptr: int, size: int, call: str) -> list[Mapping]:
        """The VMM mappings exactly tiling [ptr, ptr+size), or the CUDA error."""
        maps = self._pages.overlapping(ptr, size)
        if not maps:
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"{call}({ptr:#x}, {size}): nothing is mapped "
                             "there (mem_map first)")
        pos = ptr
        for m in maps:
            if m.kind != "vmm" or m.start != pos:
                raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"{call}({ptr:#x}, {size}): the range must "
                                 "cover whole mem_map mappings with no unmapped gap")
            pos = m.end
        if pos != ptr + size:
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"{call}({ptr:#x}, {size}): the range ends inside "
                             "a mapping or past the mapped part")
        return maps

    def mem_set_access(self, ptr: int, size: int) -> None:
        """cuMemSetAccess(read/write for this device) on whole mappings."""
        check_ptr(ptr, "mem_set_access", "CUDA_ERROR_INVALID_VALUE")
        self._vmm_size(size, "mem_set_access")
        self._check_open()
        maps = self._whole_mappings(ptr, size, "mem_set_access")
        self.counters.vmm_calls += 1
        self._spend(self.costs.vmm_set_access_us(size))
        for m in maps:
            m.accessible = True

    def mem_unmap(self, ptr: int, size: int) -> None:
        """cuMemUnmap: the range becomes a bare reservation again; a released handle dies here."""
        check_ptr(ptr, "mem_unmap", "CUDA_ERROR_INVALID_VALUE")
        self._vmm_size(size, "mem_unmap")
        self._check_open()
        maps = self._whole_mappings(ptr, size, "mem_unmap")
        self.counters.vmm_calls += 1
        self._spend(self.costs.vmm_unmap_us(size))
        for m in maps:
            self._pages.remove(m.start)
            h = m.storage
            h.mappings.discard(m.start)
            if h.released and not h.mappings:
                self._destroy_handle(h)

    def vmm_physical_bytes(self) -> int:
        """Bytes of physical VMM memory this device holds (created and not yet destroyed)."""
        live = list(self._handles.values()) + self._dying
        return sum(h.size for h in live if h.charged)
