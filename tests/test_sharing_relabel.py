"""IPC tokens an attacker re-creates or plants (issue 32, item 8).

The sender is a real second process (RemoteSender); the receiver is this one.
/dev/shm is writable by every user, so after the sender removes a share's token
anyone can create a file of the same name; and a handle relayed by someone else
can name another pid (pid 1 never exits) with a token planted for it.  Neither
may revive a share or open the sender's memory past the end of the share.
"""
from __future__ import annotations

import dataclasses
import os
import secrets

import pytest

import allocator_ref.sharing as S
from allocator_ref.sharing import tokens
from allocator_ref.device import SimDevice
from allocator_ref.device.sim.shared_segment import process_start_ticks

MiB = 2**20
NOBODY = 65534
CONFIGS = ["", "expandable_segments:True"]


@pytest.fixture
def dev():
    d = SimDevice("h100-80gb")
    yield d
    assert not d._imports and not d._handles and not d._reservations, "the receiver leaked"
    d.close()


def plant(path: str, pid: int, uid: int | None = None) -> None:
    """A token file as share_block writes one: the alive byte and the sender's start time."""
    with open(path, "wb") as f:
        f.write(b"\x01" + f"{process_start_ticks(pid)}\n".encode())
    if uid is not None:
        os.chown(path, uid, -1)


def own_copy(handle):
    """The receiver's own fds for an 'e' handle (what recv_shared hands it)."""
    if isinstance(handle, S.ExpandableBlockHandle):
        return dataclasses.replace(handle, fds=tuple(os.dup(fd) for fd in handle.fds))
    return handle


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("owner", ["same user", "another user"])
def test_recreating_a_freed_shares_token_does_not_revive_it(dev, config, owner):
    if owner == "another user" and os.getuid() != 0:
        pytest.skip("making a file another user owns needs root")
    with S.RemoteSender(4 * MiB, b"from the sender", config=config, kind="sim") as sender:
        handle = sender.share()
        block = S.open_block(dev, handle)
        assert block.read(0, 15) == b"from the sender"
        sender.free()                                        # the share ends; the token goes
        assert not os.path.exists(handle.token)
        plant(handle.token, sender.pid, NOBODY if owner == "another user" else None)
        try:
            with pytest.raises(S.SenderFreedError):
                block.read(0, 15)
            os.unlink(handle.token)
            plant(handle.token, sender.pid)                  # and again: an ended share stays ended
            with pytest.raises(S.SenderFreedError):
                block.read(0, 15)
        finally:
            os.unlink(handle.token)
            block.close()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_handle_relabelled_as_pid_1_with_a_planted_token_is_refused(dev, config):
    with S.RemoteSender(4 * MiB, b"from the sender", config=config, kind="sim") as sender:
        handle = sender.share()
        token = os.path.join(tokens._TOKEN_DIR, f"allocator_ref_share_1_{secrets.token_hex(8)}")
        plant(token, 1, uid=os.stat("/proc/1").st_uid)     # as pid 1's user would, if it could
        try:
            relabelled = own_copy(dataclasses.replace(handle, sender_pid=1, token=token))
            with pytest.raises(S.SharingError, match="relabelled"):
                S.open_block(dev, relabelled)
        finally:
            os.unlink(token)
        sender.free()


@pytest.mark.skipif(os.getuid() != 0, reason="making a file another user owns needs root")
@pytest.mark.parametrize("config", CONFIGS)
def test_a_token_planted_by_another_user_in_the_senders_name_is_refused(dev, config):
    with S.RemoteSender(4 * MiB, b"from the sender", config=config, kind="sim") as sender:
        handle = sender.share()
        token = os.path.join(tokens._TOKEN_DIR, f"allocator_ref_share_{sender.pid}_{secrets.token_hex(8)}")
        plant(token, sender.pid, uid=NOBODY)
        try:
            with pytest.raises(S.SharingError, match="planted token"):
                S.open_block(dev, own_copy(dataclasses.replace(handle, token=token)))
        finally:
            os.unlink(token)
        sender.free()


def test_share_block_never_writes_through_a_file_planted_at_its_token_name(monkeypatch, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    monkeypatch.setattr(tokens.secrets, "token_hex", lambda n: "ab" * n)
    link = os.path.join(tokens._TOKEN_DIR, f"allocator_ref_share_{os.getpid()}_{'ab' * 8}")
    os.symlink(victim, link)
    try:
        with pytest.raises(FileExistsError):
            tokens._new_token()
        assert victim.read_text() == "precious"
    finally:
        os.unlink(link)
