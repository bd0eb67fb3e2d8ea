"""IPC under attack: forged, stale and replayed handles, planted files, killed senders.

A receiver must check a handle before it maps anything, refuse with one clear error,
and leave nothing open; a sender killed with SIGKILL must not leave its files in
``/dev/shm`` past the next time the course starts sharing.
"""
import dataclasses
import os
import signal
import time
from pathlib import Path

import pytest

import allocator_ref.sharing as S
from allocator_ref.sharing import tokens
from allocator_ref.caching import CachingAllocator
from allocator_ref.device import SimDevice
from allocator_ref.device.sim.shared_segment import PREFIX, shm_dir, sweep_dead_files

MiB = 2**20


@pytest.fixture
def sender_dev():
    d = SimDevice("h100-80gb")
    yield d
    d.close()


@pytest.fixture
def dev():
    d = SimDevice("h100-80gb")
    yield d
    assert not d._imports and not d._handles and not d._reservations, "the receiver leaked"
    d.close()


def files_of(pid: int) -> list:
    return sorted(p.name for p in shm_dir().iterdir()
                  if p.name.startswith(f"{PREFIX}{pid}-") or p.name.startswith(f"allocator_ref_share_{pid}_"))


def fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def received_copy(handle):
    """What recv_shared would hand the receiver: its own fds for the same memfds."""
    return dataclasses.replace(handle, fds=tuple(os.dup(fd) for fd in handle.fds))


@pytest.fixture
def e_share(sender_dev):
    a = CachingAllocator(sender_dev, "expandable_segments:True")
    x = a.malloc(3 * MiB)
    sender_dev.write(x.ptr, b"expandable bytes")
    h = S.share_block(a, x)
    yield a, x, h
    if not x.freed:
        a.free(x)


def test_anything_but_a_handle_is_a_sharing_error(dev):
    for junk in ("x", None, 42, b"\0" * 64, {"kind": "e"}):
        with pytest.raises(S.SharingError, match="not a block handle"):
            S.open_block(dev, junk)


def test_reopening_a_consumed_e_handle_is_refused(dev, e_share):
    _, _, h = e_share
    mine = received_copy(h)
    with S.open_block(dev, mine) as blk:
        assert blk.read(0, 16) == b"expandable bytes"
    assert not any(fd_is_open(fd) for fd in mine.fds)          # consumed and closed
    with pytest.raises(S.SharingError, match="already opened once"):
        S.open_block(dev, mine)


def test_an_fd_number_naming_another_file_is_refused_and_left_alone(dev, e_share, tmp_path):
    _, _, h = e_share
    other_memfd = os.memfd_create("someone-else")
    os.ftruncate(other_memfd, h.page_size)
    regular = os.open(tmp_path / "plain", os.O_CREAT | os.O_RDWR)
    os.ftruncate(regular, h.page_size)
    try:
        for fd in (other_memfd, regular):
            forged = dataclasses.replace(h, fds=(fd,) * h.num_pages)
            with pytest.raises(S.SharingError, match="is not the memory"):
                S.open_block(dev, forged)
            assert fd_is_open(fd)                                # not ours to close
    finally:
        os.close(other_memfd)
        os.close(regular)


def test_a_refused_open_closes_the_received_fds(dev, e_share):
    a, x, h = e_share
    mine = received_copy(h)
    a.free(x)                                                    # the sender broke the rule
    with pytest.raises(S.SenderFreedError, match="freed the shared block"):
        S.open_block(dev, mine)
    assert not any(fd_is_open(fd) for fd in mine.fds)           # nothing keeps the memory alive


@pytest.mark.parametrize("change", [
    dict(offset=2**30), dict(size=0), dict(size=-1), dict(num_pages=0), dict(page_size=0),
    dict(sender_pid=0), dict(sender_pid="me"), dict(token="/etc/passwd"), dict(identities=()),
    dict(offset=-1), dict(segment_size=1),
])
def test_forged_e_fields_are_refused_before_mapping(dev, e_share, change):
    _, _, h = e_share
    forged = dataclasses.replace(received_copy(h), **change)
    with pytest.raises(S.SharingError):
        S.open_block(dev, forged)
    if "identities" in change:
        # Without identities no fd can be proven the sender's: the receiver closes none
        # (closing an unverified number could close another file of this process).
        assert all(fd_is_open(fd) for fd in forged.fds)
        for fd in forged.fds:
            os.close(fd)
    else:
        assert not any(fd_is_open(fd) for fd in forged.fds)


def test_forged_legacy_offsets_cannot_reach_past_the_segment(dev, sender_dev):
    a = CachingAllocator(sender_dev, "")
    x = a.malloc(MiB)
    h = S.share_block(a, x)
    for change in (dict(offset=h.segment_size), dict(size=h.segment_size + 1),
                   dict(segment_size=2**40, offset=2**39), dict(ipc_handle=b"nope"),
                   dict(token=tokens._TOKEN_DIR + "/allocator_ref_share_1_0000000000000000")):
        with pytest.raises(S.SharingError):
            S.open_block(dev, dataclasses.replace(h, **change))
    with S.open_block(dev, h) as blk:                         # the genuine one still works
        assert blk.size == x.size
    a.free(x)


def test_a_fifo_at_the_token_path_does_not_block(dev, e_share):
    _, _, h = e_share
    fifo = os.path.join(tokens._TOKEN_DIR, f"allocator_ref_share_{os.getpid()}_{'f' * 16}")
    os.mkfifo(fifo)
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("open_block blocked on a FIFO"))
    signal.alarm(20)
    try:
        forged = dataclasses.replace(received_copy(h), token=fifo)
        with pytest.raises(S.SharingError, match="not a liveness token"):
            S.open_block(dev, forged)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.unlink(fifo)


def test_freed_shares_leave_no_token_files(sender_dev):
    a = CachingAllocator(sender_dev, "")
    mine = f"allocator_ref_share_{os.getpid()}_"
    before = {f for f in os.listdir(tokens._TOKEN_DIR) if f.startswith(mine)}
    for _ in range(300):
        x = a.malloc(MiB)
        S.share_block(a, x)
        a.free(x)
    after = {f for f in os.listdir(tokens._TOKEN_DIR) if f.startswith(mine)}
    assert after == before and S.active_shares() == 0


@pytest.mark.slow
@pytest.mark.parametrize("config", ["", "expandable_segments:True"])
def test_a_killed_sender_is_swept_the_next_time_sharing_starts(dev, config):
    sender = S.RemoteSender(4 * MiB, b"about to die", config=config, kind="sim")
    handle = sender.share()
    blk = S.open_block(dev, handle)
    assert blk.read(0, 12) == b"about to die"
    os.kill(sender.pid, signal.SIGKILL)                  # no atexit, no finalizer
    sender.process.join(30)
    left = files_of(sender.pid)
    assert left, "the killed sender should have left its token (and segment) behind"
    with pytest.raises(S.SenderFreedError, match="has exited"):
        blk.read(0, 4)
    blk.close()
    # The next process that starts sharing sweeps the dead sender's files.
    with S.RemoteSender(MiB, b"next", config=config, kind="sim") as nxt:
        nxt.share()
        deadline = time.time() + 30
        while files_of(sender.pid) and time.time() < deadline:
            time.sleep(0.1)
    assert files_of(sender.pid) == []
    sender.conn.close()


def test_sweep_removes_only_files_of_dead_processes(tmp_path):
    alive = tmp_path / f"allocator_ref_share_{os.getpid()}_{'a' * 16}"
    dead_pid = 2**22 + 12345                           # above pid_max on most systems: never running
    dead = [tmp_path / f"allocator_ref_share_{dead_pid}_{'b' * 16}",
            tmp_path / f"{PREFIX}{dead_pid}-3-{'c' * 16}"]
    unrelated = tmp_path / f"notes-{dead_pid}.txt"
    for path in (alive, unrelated, *dead):
        path.write_bytes(b"\x01")
    removed = sweep_dead_files(tmp_path)
    assert sorted(removed) == sorted(p.name for p in dead)
    assert alive.exists() and unrelated.exists() and not any(p.exists() for p in dead)


def test_sweep_removes_files_whose_pid_was_reused_by_a_newer_process(tmp_path):
    """The pid in a file's name runs again, but the start time the file recorded is not that
    process's: its maker died and the kernel reused the pid, so the file is swept.  Files that
    record this process's own start time, and older files that record none, stay."""
    import struct
    import sys
    from allocator_ref.device.sim import shared_segment as SS
    if not sys.platform.startswith("linux"):
        pytest.skip("process start times are read from Linux's /proc")
    me = os.getpid()
    mine = SS.process_start_ticks(me)
    assert mine > 0
    token_reused = tmp_path / f"allocator_ref_share_{me}_{'d' * 16}"
    token_mine = tmp_path / f"allocator_ref_share_{me}_{'e' * 16}"
    token_old = tmp_path / f"allocator_ref_share_{me}_{'f' * 16}"       # written before start times
    token_reused.write_bytes(b"\x01" + f"{mine + 1}\n".encode())
    token_mine.write_bytes(b"\x01" + f"{mine}\n".encode())
    token_old.write_bytes(b"\x01")
    seg_reused = tmp_path / f"{PREFIX}{me}-1-{'a' * 16}"
    seg_mine = tmp_path / f"{PREFIX}{me}-2-{'b' * 16}"
    for path, started in ((seg_reused, mine + 7), (seg_mine, mine)):
        path.write_bytes(struct.pack(SS._HEADER_FMT, SS._MAGIC, 1, me, 0, started).ljust(SS.HEADER, b"\0"))
    assert sorted(sweep_dead_files(tmp_path)) == sorted([token_reused.name, seg_reused.name])
    assert token_mine.exists() and token_old.exists() and seg_mine.exists()


def test_real_tokens_and_segments_record_their_makers_start_time(dev):
    """What the sweep relies on: a share's token file and an IPC segment's header carry the
    sender's start time, so a pid reused later cannot pass for it."""
    import sys
    from allocator_ref.device.sim import shared_segment as SS
    if not sys.platform.startswith("linux"):
        pytest.skip("process start times are read from Linux's /proc")
    token = Path(tokens._new_token())
    try:
        assert SS.recorded_start_ticks(token) == SS.process_start_ticks(os.getpid()) > 0
        assert tokens._token_state(str(token)) == "alive"
    finally:
        tokens._remove_token(str(token))
    seg = SS.SharedSegment.create(os.getpid(), 99, 0x1234, 4096)
    try:
        assert SS.recorded_start_ticks(seg.path) == SS.process_start_ticks(os.getpid())
        assert seg.alive()
    finally:
        seg.path.unlink()
