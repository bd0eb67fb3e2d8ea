"""Loading snapshots must never run code, and bad files must say what is wrong."""
import os
import pickle

import pytest

from allocator_ref.trace import SnapshotError, load_snapshot, read_rmm_log, save_snapshot


class Evil:
    def __reduce__(self):
        return (os.system, ("touch PWNED_BY_SNAPSHOT",))


def test_hostile_pickle_is_refused_without_running(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": Evil()}))
    with pytest.raises(SnapshotError, match="refused to load the global") as info:
        load_snapshot(path)
    assert "evil.pickle" in str(info.value)
    assert not (tmp_path / "PWNED_BY_SNAPSHOT").exists()


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (pickle.dumps({"segments": [{"address": 0}]})[:-7], "truncated"),
    (pickle.dumps([1, 2, 3]), "segment 0"),
    (pickle.dumps({"traces": []}), "no 'segments'"),
    (pickle.dumps("hello"), "expected a dict"),
    (pickle.dumps({"segments": [], "device_traces": [[{"addr": 1}]]}), "no 'action'"),
])
def test_bad_files_get_clear_errors(tmp_path, content, message):
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(SnapshotError, match=message) as info:
        load_snapshot(path)
    assert "bad.pickle" in str(info.value)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(SnapshotError, match="nope.pickle"):
        load_snapshot(tmp_path / "nope.pickle")


def test_saved_snapshots_use_protocol_4_and_plain_types(tmp_path):
    path = save_snapshot({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 2,
                                                              "stream": 0, "pool_id": (0, 0)}]]},
                         tmp_path / "s.pickle")
    data = path.read_bytes()
    assert data[:2] == b"\x80\x04"
    assert load_snapshot(path)["device_traces"][0][0]["pool_id"] == (0, 0)
    with pytest.raises(TypeError, match="plain data"):
        save_snapshot({"segments": [], "x": {1, 2}}, tmp_path / "t.pickle")


def test_rmm_log_becomes_trace_events(tmp_path):
    path = tmp_path / "rmm.csv"
    path.write_text("Thread,Time,Action,Pointer,Size,Stream\n"
                    "1,0.1,allocate,0x7f0000000000,1024,0x0\n"
                    "1,0.2,allocate,0x7f0000100000,4096,0x1\n"
                    "1,0.3,free,0x7f0000000000,1024,0x0\n")
    events = read_rmm_log(path)
    assert [e.action for e in events] == ["alloc", "alloc", "free_requested", "free_completed"]
    assert events[1].stream == 1 and events[1].size == 4096
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an RMM log"):
        read_rmm_log(bad)
