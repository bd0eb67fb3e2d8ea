"""Shared-memory segments: how simulated device memory crosses OS processes.

Two real processes each have their own SimDevice, so "the same GPU memory"
has to be memory both can map.  Two mechanisms, matching CUDA's two IPC styles:

* :class:`SharedSegment` -- a file in ``/dev/shm`` named by numbers that fit
  in a 64-byte cudaIpcMemHandle.  Its first 4 KiB hold a header with a
  **liveness word** and the exporter's pid: the exporter clears the word when
  it frees the allocation (or closes/exits), and an importer checks it (and
  that the pid still runs) before every access, so it gets a clear error
  instead of stale bytes.  The exporter unlinks the file when it frees the
  allocation; importers keep their mapping until they close it.
* :func:`memfd_segment` -- an anonymous ``memfd`` for VMM shareable handles
  (cuMemExportToShareableHandle with POSIX_FILE_DESCRIPTOR): the fd itself is
  the handle and travels over a Unix socket, exactly as with a real driver.
"""
from __future__ import annotations

import mmap
import os
import re
import stat
import struct
import tempfile
from pathlib import Path

from ..errors import cuda_error

HEADER = 4096
_MAGIC = 0x4152_5349_4D53_4547          # "ARSIMSEG"
_HEADER_FMT = "<QQQQQ"                  # magic, alive, exporter pid, size, exporter start (ticks)
PREFIX = "allocator_ref-"


def shm_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def segment_path(pid: int, seq: int, token: int) -> Path:
    return shm_dir() / f"{PREFIX}{pid}-{seq}-{token:016x}"


# The files the course leaves in shm_dir(): legacy IPC segments (this module) and the
# liveness tokens of allocator_ref/sharing/tokens.py.  Both name the process that made them.
_OUR_FILES = re.compile(r"^(?:allocator_ref-(\d+)-\d+-[0-9a-f]{16}|allocator_ref_share_(\d+)_[0-9a-f]{16})$")
_swept = False


def sweep_dead_files(directory: "Path | None" = None) -> list:
    """Remove the segment and token files of processes that died without cleaning up.

    A process killed with SIGKILL runs no atexit handler and no finalizer, so its files
    stay in ``/dev/shm`` (memory nobody can free).  Only regular files of this user whose
    process no longer runs are removed.  A pid that runs again but started at another time
    than the one its file recorded belongs to a newer process (the kernel reused the pid),
    so that file goes too.  Returns the names removed.
    """
    directory = Path(directory or shm_dir())
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _OUR_FILES.match(name)
        if not match:
            continue
        pid = int(match.group(1) or match.group(2))
        path = directory / name
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            continue
        if _maker_runs(pid, recorded_start_ticks(path)):
            continue
        try:
            path.unlink()
            removed.append(name)
        except OSError:
            pass
    return removed


def sweep_once() -> None:
    """Sweep the files of dead processes once per process, when it first starts sharing."""
    global _swept
    if not _swept:
        _swept = True
        sweep_dead_files()


def process_start_ticks(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot (field 22 of Linux's /proc/PID/stat).

    A pid alone can name two processes over time (the kernel reuses pids); a pid and its
    start time name one.  0 where it cannot be read (not Linux, or no such process).
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])                          # field 22; fields[0] is field 3
    except (OSError, ValueError, IndexError):
        return 0


def recorded_start_ticks(path: Path) -> int:
    """The maker's start time a course file recorded (0 if none: older files, or unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        head = os.read(fd, struct.calcsize(_HEADER_FMT))
    except OSError:
        return 0
    finally:
        os.close(fd)
    if path.name.startswith(PREFIX):                    # a segment: the header's last field
        if len(head) < struct.calcsize(_HEADER_FMT):
            return 0
        magic, *_, started = struct.unpack_from(_HEADER_FMT, head, 0)
        return started if magic == _MAGIC else 0
    text = head[1:].split(b"\n", 1)[0]                 # a token: alive byte, then the ticks
    return int(text) if text.isdigit() else 0


def _maker_runs(pid: int, started: int) -> bool:
    """Does the process that made a file still run?  ``started`` is the start time it recorded
    (0: unknown, and then a running pid is taken to be it)."""
    if not pid_alive(pid):
        return False
    return started == 0 or process_start_ticks(pid) in (0, started)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (signal 0 checks without sending anything; a process of
    another user answers PermissionError, and it runs).  sharing/tokens.py asks it too."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SharedSegment:
    """A header page + ``size`` data bytes in a shared file, mapped into this process."""

    def __init__(self, path: Path, size: int, mm: mmap.mmap, owner: bool) -> None:
        self.path, self.size, self._mm, self.owner = path, size, mm, owner
        self.data = memoryview(mm)[HEADER:HEADER + size]

    @classmethod
    def create(cls, pid: int, seq: int, token: int, size: int) -> "SharedSegment":
        path = segment_path(pid, seq, token)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, HEADER + size)       # sparse: untouched pages cost nothing
            mm = mmap.mmap(fd, HEADER + size)
        finally:
            os.close(fd)
        struct.pack_into(_HEADER_FMT, mm, 0, _MAGIC, 1, pid, size, process_start_ticks(pid))
        return cls(path, size, mm, owner=True)

    @classmethod
    def open(cls, pid: int, seq: int, token: int, size: int) -> "SharedSegment":
        path = segment_path(pid, seq, token)
        try:
            # Never block (a FIFO planted at the name) and never follow a planted link.
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise cuda_error("CUDA_ERROR_INVALID_CONTEXT", "cannot open the IPC handle: the exporting "
                             "process freed this allocation or exited") from None
        except OSError as exc:
            raise cuda_error("cudaErrorInvalidValue", f"cannot open the IPC handle: {path.name} is not "
                             f"an IPC segment ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != HEADER + size:
                raise cuda_error("cudaErrorInvalidValue", f"cannot open the IPC handle: {path.name} is not "
                                 f"the {size}-byte segment the handle names")
            mm = mmap.mmap(fd, HEADER + size)
        finally:
            os.close(fd)
        magic, _alive, owner_pid, owner_size, _started = struct.unpack_from(_HEADER_FMT, mm, 0)
        if magic != _MAGIC or owner_pid != pid or owner_size != size:
            mm.close()
            raise cuda_error("cudaErrorInvalidValue", "cannot open the IPC handle: the segment's header "
                             "does not match the handle (a forged or stale handle)")
        seg = cls(path, size, mm, owner=False)
        seg.check_alive()
        return seg

    def alive(self) -> bool:
        # (The pid check is cheap enough for every access; the start-time check of a reused
        # pid reads /proc, so only the sweep makes it.)
        magic, alive, pid, _, _started = struct.unpack_from(_HEADER_FMT, self._mm, 0)
        return magic == _MAGIC and alive == 1 and pid_alive(pid)

    def check_alive(self) -> None:
        """Raise the clear error an importer deserves once the exporter is gone."""
        if self._mm.closed or not self.alive():
            if not self.owner:                    # a crashed exporter could not unlink: tidy up
                self.path.unlink(missing_ok=True)
            raise cuda_error("CUDA_ERROR_INVALID_CONTEXT", "the exporting process freed this allocation "
                             "or exited; close the IPC handle (ipc_close_mem_handle)")

    def retire(self) -> None:
        """Exporter side: clear the liveness word and remove the name (importers keep their mapping)."""
        if not self._mm.closed:
            struct.pack_into("<Q", self._mm, 8, 0)
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Unmap it from this process."""
        if self._mm.closed:
            return
        self.data.release()
        try:
            self._mm.close()
        except BufferError:          # a view is still held somewhere; the GC will unmap it
            pass


def memfd_segment(size: int) -> tuple[int, mmap.mmap]:
    """A new anonymous shared memory file of ``size`` bytes: (fd, mapping)."""
    fd = os.memfd_create("allocator_ref-vmm", 0)
    os.ftruncate(fd, size)
    return fd, mmap.mmap(fd, size)


def map_fd(fd: int) -> tuple[int, int, mmap.mmap]:
    """Map a received memfd: (our own fd, size, mapping)."""
    own = os.dup(fd)
    size = os.fstat(own).st_size
    return own, size, mmap.mmap(own, size)
