"""The page table: which storage answers for each mapped device address.

A *mapping* says "device addresses ``[start, start+size)`` are the bytes of
``storage`` starting at ``offset``".  cudaMalloc makes one mapping per
allocation; cuMemMap makes one per call (and ``accessible`` stays False until
cuMemSetAccess); pinned host memory and IPC imports map a FlatBuffer.

Kernels and copies go through :meth:`PageTable.segments`, which raises
``CUDA_ERROR_ILLEGAL_ADDRESS`` for any byte that is unmapped or has no access
rights -- what a GPU kernel would hit as an illegal memory access.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from sortedcontainers import SortedDict

from ..errors import cuda_error


@dataclass
class Mapping:
    start: int
    size: int
    storage: object          # LazyPages, FlatBuffer or a physical handle (anything with read/write/fill)
    offset: int = 0
    accessible: bool = True
    kind: str = "malloc"     # malloc | pool | vmm | pinned | ipc

    @property
    def end(self) -> int:
        return self.start + self.size


class PageTable:
    def __init__(self) -> None:
        self._maps = SortedDict()          # start -> Mapping

    def add(self, mapping: Mapping) -> None:
        self._maps[mapping.start] = mapping

    def remove(self, start: int) -> Mapping:
        return self._maps.pop(start)

    def get(self, start: int) -> Mapping | None:
        return self._maps.get(start)

    def overlapping(self, start: int, size: int) -> list[Mapping]:
        """Every mapping that shares at least one byte with ``[start, start+size)``."""
        found = []
        i = self._maps.bisect_right(start)
        if i > 0:
            before = self._maps.values()[i - 1]
            if before.end > start:
                found.append(before)
        for s in self._maps.irange(start, start + size, inclusive=(False, False)):
            found.append(self._maps[s])
        return found

    def segments(self, ptr: int, nbytes: int) -> Iterator[tuple[Mapping, int, int, int]]:
        """Split ``[ptr, ptr+nbytes)`` into (mapping, offset in storage, length, position) pieces.

        Raises CUDA_ERROR_ILLEGAL_ADDRESS if any byte is not mapped, or mapped
        without access rights.
        """
        pos = 0
        pieces = []
        while pos < nbytes:
            addr = ptr + pos
            i = self._maps.bisect_right(addr)
            m = self._maps.values()[i - 1] if i > 0 else None
            if m is None or m.end <= addr:
                raise cuda_error("CUDA_ERROR_ILLEGAL_ADDRESS",
                                 f"address {addr:#x} is not mapped on this device "
                                 "(freed, never allocated, or reserved but not cuMemMap'ed)")
            if not m.accessible:
                raise cuda_error("CUDA_ERROR_ILLEGAL_ADDRESS",
                                 f"address {addr:#x} is mapped but has no access rights: "
                                 "call mem_set_access (cuMemSetAccess) after mem_map")
            length = min(m.end - addr, nbytes - pos)
            pieces.append((m, m.offset + addr - m.start, length, pos))
            pos += length
        return iter(pieces)

    # --- byte access through the mappings ---------------------------------
    def read(self, ptr: int, nbytes: int) -> bytes:
        out = bytearray(nbytes)
        for m, off, length, pos in self.segments(ptr, nbytes):
            out[pos:pos + length] = m.storage.read(off, length)
        return bytes(out)

    def write(self, ptr: int, data: bytes) -> None:
        view = memoryview(data).cast("B")
        for m, off, length, pos in self.segments(ptr, len(view)):
            m.storage.write(off, view[pos:pos + length])

    def fill(self, ptr: int, nbytes: int, value: int) -> None:
        for m, off, length, _ in self.segments(ptr, nbytes):
            m.storage.fill(off, length, value)
