"""The CUDA virtual memory "three steps" as small functions, and a growable buffer built from them.

CUDA's VMM API (``cuMem*``, the CUDA Driver API's "Virtual Memory Management" section) splits what
``cudaMalloc`` does in one call into separate objects:

1. **reserve** a virtual address range  -- :func:`reserve_range`  (``cuMemAddressReserve``);
2. **create** physical memory            -- :func:`create_physical` (``cuMemCreate``);
3. **map** it into the range and **grant** access -- :func:`map_and_grant`
   (``cuMemMap`` + ``cuMemSetAccess``).

And back: :func:`unmap` (``cuMemUnmap``), :func:`release` (``cuMemRelease``),
:func:`free_range` (``cuMemAddressFree``).  Every function takes the device
first and works on both devices (the simulated one and a GPU through
cuda-python); errors are the device's ``CudaError`` with CUDA's own code.

:class:`GrowableBuffer` is NVIDIA's "growable vector" idea (the CUDA blog post
*Introducing Low-Level GPU Virtual Memory Management*): reserve a large
virtual range once, map physical pages at its end as the buffer grows.  The
address never changes and no byte is copied, which is exactly what PyTorch's
expandable segments do (``allocator_ref/caching/expandable.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .editions.messages import translator

tr = translator("doctor")          # the buffer picture's words in the reader's language

__all__ = [
    "granularity", "round_up", "reserve_range", "create_physical", "map_and_grant", "unmap",
    "release", "free_range", "GrowableBuffer", "BufferState",
]


# ------------------------------------------------------------------ the three steps

def granularity(dev: Any) -> int:
    """``cuMemGetAllocationGranularity``: sizes, offsets and addresses are multiples of it (2 MiB)."""
    return dev.vmm_granularity()


def round_up(dev: Any, nbytes: int) -> int:
    """``nbytes`` rounded up to the device's VMM granularity (at least one granule)."""
    g = granularity(dev)
    return max(g, -(-int(nbytes) // g) * g)


def reserve_range(dev: Any, size: int, alignment: int = 0) -> int:
    """Step 1, ``cuMemAddressReserve``: addresses only; costs no device memory.  Returns the start."""
    return dev.address_reserve(size, alignment)


def create_physical(dev: Any, size: int) -> int:
    """Step 2, ``cuMemCreate``: device memory with no address yet.  Returns the physical handle."""
    return dev.mem_create(size)


def map_and_grant(dev: Any, ptr: int, size: int, handle: int, offset: int = 0) -> None:
    """Step 3, ``cuMemMap`` then ``cuMemSetAccess`` (read/write): the bytes become usable at ``ptr``.

    If setting access fails the mapping is undone, so nothing is left half done.
    """
    dev.mem_map(ptr, size, handle, offset)
    try:
        dev.mem_set_access(ptr, size)
    except Exception:
        dev.mem_unmap(ptr, size)
        raise


def unmap(dev: Any, ptr: int, size: int) -> None:
    """``cuMemUnmap``: the range is a bare reservation again (whole mappings only)."""
    dev.mem_unmap(ptr, size)


def release(dev: Any, handle: int) -> None:
    """``cuMemRelease``: drop the handle; the memory goes when its last mapping is unmapped."""
    dev.mem_release(handle)


def free_range(dev: Any, ptr: int, size: int) -> None:
    """``cuMemAddressFree``: give back a whole reservation (nothing may still be mapped in it)."""
    dev.address_free(ptr, size)


# ------------------------------------------------------------------ the growable buffer

@dataclass(frozen=True)
class BufferState:
    """A picture of a :class:`GrowableBuffer` at one moment (what a chapter animates)."""

    va_start: int              # the reservation (never moves)
    va_size: int
    page_size: int
    size: int                  # logical bytes in use
    pages: tuple               # ((address, physical handle), ...) mapped, in address order
    label: str = ""

    @property
    def mapped(self) -> int:
        return len(self.pages) * self.page_size

    def to_svg(self, width: int = 640) -> str:
        """One bar: the reserved range (grey outline), mapped pages (blue), the bytes in use (dark)."""
        slots = max(1, self.va_size // self.page_size)
        h, top = 34, 18
        cell = width / slots
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 2}" height="{top + h + 18}" '
                 f'font-family="monospace" font-size="11">',
                 '<text x="1" y="12">' + _esc(tr("{label}  virtual {virtual} MiB at {address}, mapped {mapped} MiB, "
                                                 "used {used} MiB", label=self.label, virtual=self.va_size >> 20,
                                                 address=f"{self.va_start:#x}", mapped=self.mapped >> 20,
                                                 used=f"{self.size / 2**20:.2f}")) + '</text>',
                 f'<rect x="1" y="{top}" width="{width}" height="{h}" fill="#f4f4f4" stroke="#999" '
                 f'stroke-dasharray="4 2"/>']
        for i, (addr, handle) in enumerate(self.pages):
            slot = (addr - self.va_start) // self.page_size
            x = 1 + slot * cell
            used = min(self.page_size, max(0, self.size - slot * self.page_size))
            parts.append(f'<rect x="{x:.1f}" y="{top}" width="{cell:.1f}" height="{h}" fill="#9cc3e6" '
                         f'stroke="#fff"><title>{tr("page {slot}: handle {handle}", slot=slot, handle=f"{handle:#x}")}'
                         '</title></rect>')
            if used:
                parts.append(f'<rect x="{x:.1f}" y="{top + 8}" width="{cell * used / self.page_size:.1f}" '
                             f'height="{h - 16}" fill="#1f4e79"/>')
            if cell >= 28:
                parts.append(f'<text x="{x + 2:.1f}" y="{top + h + 12}" font-size="9">h{handle:#x}</text>')
        parts.append("</svg>")
        return "".join(parts)


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class GrowableBuffer:
    """A buffer that grows in place: one virtual reservation, physical pages mapped on demand.

        buf = GrowableBuffer(dev, max_size=64 << 20)   # reserve 64 MiB of addresses, no memory
        buf.append(b"x" * 3_000_000)                   # maps two 2 MiB pages at buf.ptr
        buf.append(b"y" * 3_000_000)                   # maps one more page after them; nothing copied
        buf.read(0, 4)                                 # b"xxxx": the bytes stayed where they were
        buf.close()                                    # unmap, release, free the range

    ``history`` keeps a :class:`BufferState` after every change, for animation.
    """

    def __init__(self, dev: Any, max_size: int, page_size: Optional[int] = None) -> None:
        self.device = dev
        g = granularity(dev)
        if page_size is not None and (isinstance(page_size, bool) or not isinstance(page_size, int)):
            raise ValueError(f"page_size must be a whole number of bytes, got {page_size!r}")
        self.page_size = page_size or g
        if self.page_size <= 0 or self.page_size % g:
            raise ValueError(f"page_size must be a positive multiple of the VMM granularity {g}, "
                             f"got {page_size!r}")
        if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size <= 0:
            raise ValueError(f"max_size must be a positive int, got {max_size!r}")
        self.va_size = -(-max_size // self.page_size) * self.page_size
        self.ptr = reserve_range(dev, self.va_size)          # step 1, once
        self.handles: list[int] = []                         # page i is mapped at ptr + i*page_size
        self.size = 0
        self.closed = False
        self.history: list[BufferState] = []
        self._snap(tr("reserved"))

    # --- state --------------------------------------------------------------
    @property
    def mapped(self) -> int:
        """Physical bytes behind the buffer (whole pages)."""
        return len(self.handles) * self.page_size

    def state(self, label: str = "") -> BufferState:
        pages = tuple((self.ptr + i * self.page_size, h) for i, h in enumerate(self.handles))
        return BufferState(self.ptr, self.va_size, self.page_size, self.size, pages, label)

    def _snap(self, label: str) -> None:
        self.history.append(self.state(label))

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("GrowableBuffer is closed")

    @staticmethod
    def _check_count(value: Any, what: str) -> int:
        """A byte count must be a whole number >= 0 (checked before any page is touched)."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"GrowableBuffer: {what} must be a whole number of bytes >= 0, got {value!r}")
        return value

    def _unmap_down_to(self, pages: int) -> None:
        """Unmap and release pages from the end until ``pages`` remain."""
        while len(self.handles) > pages:
            h = self.handles.pop()
            unmap(self.device, self.ptr + len(self.handles) * self.page_size, self.page_size)
            release(self.device, h)

    # --- growing and shrinking ------------------------------------------------
    def reserve(self, nbytes: int) -> None:
        """Make sure ``nbytes`` are backed by mapped pages (like ``std::vector::reserve``)."""
        self._check_open()
        self._check_count(nbytes, "reserve(nbytes)")
        if nbytes > self.va_size:
            raise ValueError(f"GrowableBuffer: {nbytes} bytes do not fit in the {self.va_size}-byte "
                             "virtual reservation; create the buffer with a larger max_size")
        need = -(-nbytes // self.page_size)
        new: list[int] = []
        try:
            for i in range(len(self.handles), need):
                h = create_physical(self.device, self.page_size)                 # step 2
                new.append(h)
                try:
                    map_and_grant(self.device, self.ptr + i * self.page_size, self.page_size, h)  # step 3
                except Exception:
                    new.pop()
                    release(self.device, h)
                    raise
                self.handles.append(h)
        except Exception:
            for h in reversed(new):          # undo this call only: the buffer is as it was
                self.handles.pop()
                unmap(self.device, self.ptr + len(self.handles) * self.page_size, self.page_size)
                release(self.device, h)
            raise
        if new:
            self._snap(tr("mapped {n} page(s)", n=len(new)))

    def resize(self, nbytes: int) -> None:
        """Set the logical size; grows the mapping when needed (never shrinks it: see ``shrink_to_fit``)."""
        self._check_open()
        self._check_count(nbytes, "resize(nbytes)")
        self.reserve(nbytes)
        self.size = nbytes
        self._snap(tr("size {nbytes}", nbytes=nbytes))

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end (a host-to-device copy); returns the offset it was written at."""
        self._check_open()
        try:
            payload = bytes(memoryview(data))      # bytes-like only: not a str, not an int
        except TypeError:
            raise TypeError(f"GrowableBuffer.append needs bytes-like data (bytes, bytearray, "
                            f"memoryview), got {type(data).__name__}") from None
        offset, pages = self.size, len(self.handles)
        self.reserve(offset + len(payload))
        try:
            if payload:
                self.device.write(self.ptr + offset, payload)
        except BaseException:
            self._unmap_down_to(pages)             # the pages this call mapped go back
            raise
        self.size = offset + len(payload)
        self._snap(tr("append {n} B", n=len(data)))
        return offset

    def read(self, offset: int = 0, nbytes: Optional[int] = None) -> bytes:
        """Read bytes back (device-to-host)."""
        self._check_open()
        self._check_count(offset, "read(offset)")
        nbytes = self.size - offset if nbytes is None else self._check_count(nbytes, "read(nbytes)")
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError(f"read({offset}, {nbytes}) is outside the {self.size} bytes in use")
        return self.device.read(self.ptr + offset, nbytes) if nbytes else b""

    def shrink_to_fit(self) -> None:
        """Unmap and release the pages past the last byte in use (the range stays reserved)."""
        self._check_open()
        keep = -(-self.size // self.page_size)
        dropped = max(0, len(self.handles) - keep)
        self._unmap_down_to(keep)
        if dropped:
            self._snap(tr("unmapped {n} page(s)", n=dropped))

    def close(self) -> None:
        """Unmap and release every page, then free the virtual range.  Safe to call twice."""
        if self.closed:
            return
        self.device.synchronize()        # queued kernels may still touch the pages
        self._unmap_down_to(0)
        free_range(self.device, self.ptr, self.va_size)
        self.size = 0
        self.closed = True
        self.history.append(BufferState(self.ptr, self.va_size, self.page_size, 0, (), "closed"))

    def __enter__(self) -> "GrowableBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        # the state in the reader's language (chapter 5 prints the buffer); the class and field names are code
        state = tr("closed") if self.closed else tr("{used} B used, {pages} page(s) mapped", used=self.size,
                                                     pages=len(self.handles))
        return f"GrowableBuffer(ptr={self.ptr:#x}, virtual={self.va_size}, {state})"
