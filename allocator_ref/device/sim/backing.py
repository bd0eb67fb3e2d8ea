"""Where the simulated device keeps the bytes kernels write.

Two kinds of storage, both with ``read``/``write``/``fill`` at an offset:

* :class:`LazyPages` -- device memory.  Nothing is stored until a kernel
  writes: a dict maps a 64 KiB page index to a ``bytearray``, or to a single
  int when the whole page holds one byte value (a big ``fill`` stays cheap).
  Untouched memory reads as zeros, so an 80 GiB device costs no RAM.
* :class:`FlatBuffer` -- bytes that live in a buffer someone else owns:
  pinned host memory (the host's memoryview *is* the storage: zero-copy) or a
  shared-memory segment (IPC).  An optional ``check`` runs before each access
  (IPC uses it to notice that the exporting process went away).
"""
from __future__ import annotations

from typing import Callable, Optional

PAGE_SIZE = 64 * 1024


class LazyPages:
    """Device memory stored per 64 KiB page, only where something was written."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pages: dict[int, bytearray | int] = {}

    def _page(self, index: int) -> bytearray:
        """The page as a bytearray, materialising it if needed."""
        page = self.pages.get(index, 0)
        if isinstance(page, int):
            page = bytearray([page]) * PAGE_SIZE if page else bytearray(PAGE_SIZE)
            self.pages[index] = page
        return page

    def _spans(self, offset: int, nbytes: int):
        """Yield (page index, start in page, end in page, position in the request)."""
        pos = 0
        while pos < nbytes:
            index, start = divmod(offset + pos, PAGE_SIZE)
            end = min(PAGE_SIZE, start + nbytes - pos)
            yield index, start, end, pos
            pos += end - start

    def read(self, offset: int, nbytes: int) -> bytes:
        out = bytearray(nbytes)
        for index, start, end, pos in self._spans(offset, nbytes):
            page = self.pages.get(index, 0)
            if isinstance(page, int):
                if page:
                    out[pos:pos + end - start] = bytes([page]) * (end - start)
            else:
                out[pos:pos + end - start] = page[start:end]
        return bytes(out)

    def write(self, offset: int, data) -> None:
        data = memoryview(data).cast("B")
        for index, start, end, pos in self._spans(offset, len(data)):
            self._page(index)[start:end] = data[pos:pos + end - start]

    def fill(self, offset: int, nbytes: int, value: int) -> None:
        for index, start, end, _ in self._spans(offset, nbytes):
            if start == 0 and end == PAGE_SIZE:
                if value:
                    self.pages[index] = value       # a whole page of one value: one int
                else:
                    self.pages.pop(index, None)     # zeros are the default
            else:
                self._page(index)[start:end] = bytes([value]) * (end - start)

    def copy_into(self, view: memoryview) -> None:
        """Write every stored page into ``view`` (used when memory moves to shared memory)."""
        for index, page in self.pages.items():
            start = index * PAGE_SIZE
            end = min(start + PAGE_SIZE, self.size)
            if isinstance(page, int):
                view[start:end] = bytes([page]) * (end - start)
            else:
                view[start:end] = page[: end - start]


class FlatBuffer:
    """Bytes in a buffer owned elsewhere (pinned host memory, a shared segment)."""

    def __init__(self, view: memoryview, check: Optional[Callable[[], None]] = None) -> None:
        self.view = view
        self.size = len(view)
        self.check = check

    def read(self, offset: int, nbytes: int) -> bytes:
        if self.check:
            self.check()
        return bytes(self.view[offset:offset + nbytes])

    def write(self, offset: int, data) -> None:
        if self.check:
            self.check()
        data = memoryview(data).cast("B")
        self.view[offset:offset + len(data)] = data

    def fill(self, offset: int, nbytes: int, value: int) -> None:
        if self.check:
            self.check()
        self.view[offset:offset + nbytes] = bytes([value]) * nbytes
