"""Every file people hand around loads: the memory_viz HTML page PyTorch's own _memory_viz writes
(the snapshot embedded in it), JSON snapshots, and segments of thousands of blocks.

The pages are written by torch.cuda._memory_viz from course-made snapshots (the optional torch
CPU wheel; those tests skip without it). Hostile pages get one clear line, as a pickle does."""
import base64
import json
import pickle
import subprocess
import sys

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.memory_doctor import doctor
from allocator_ref.trace import SnapshotError, save_snapshot
from allocator_ref.trace.recording import load_recording
from allocator_ref.trace.replay import replay

MiB, GiB = 2**20, 2**30


def course_run() -> dict:
    a = ar.CachingAllocator(ar.SimDevice("h100-80gb"), "")
    a.record_memory_history(max_entries=100_000)
    held = [a.malloc((k % 7 + 1) * MiB + k * 4096) for k in range(40)]
    for x in held[::3]:
        a.free(x)
    return a.snapshot()


def _memory_viz(*args):
    return subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def pickled(tmp_path):
    snap = course_run()
    return snap, save_snapshot(snap, tmp_path / "run.pickle")


@pytest.mark.parametrize("plot", ["trace_plot", "segment_plot"])
def test_a_page_written_by_torch_memory_viz_loads_as_its_pickle(plot, pickled, tmp_path):
    pytest.importorskip("torch", reason="the optional torch CPU wheel writes the page")
    snap, path = pickled
    page = tmp_path / "run.html"
    proc = _memory_viz(plot, path, "-o", page)
    assert proc.returncode == 0, proc.stderr
    assert b"local_files" in page.read_bytes()
    from_page, from_pickle = load_recording(page), load_recording(path)
    assert from_page.snapshot == from_pickle.snapshot and from_page.source == str(page)
    result = replay(page, verify=True, progress=False)
    assert result.perfect
    assert result.devices[0].peak_reserved == from_pickle.device(0).peak_reserved > 0


def test_the_doctor_command_reads_a_page(pickled, tmp_path, capsys):
    pytest.importorskip("torch", reason="the optional torch CPU wheel writes the page")
    _, path = pickled
    page = tmp_path / "posted.html"
    assert _memory_viz("trace_plot", path, "-o", page).returncode == 0
    assert main(["doctor", str(page)]) == 0
    assert "Reproduced: yes" in capsys.readouterr().out


def test_json_snapshots_load_the_dict_and_the_local_files_list(pickled, tmp_path):
    snap, path = pickled
    as_dict = tmp_path / "run.json"
    as_dict.write_text(json.dumps(snap))                      # json.dump(torch.cuda.memory._snapshot())
    files = tmp_path / "local_files.json"                     # what _format_viz embeds in the page
    files.write_text(json.dumps([{"name": "snapshot.pickle",
                                  "base64": base64.b64encode(path.read_bytes() + b"\0").decode()}]))
    expected = load_recording(path).device(0)
    for f in (as_dict, files):
        dev = load_recording(f).device(0)
        assert [e["action"] for e in dev.events] == [e["action"] for e in expected.events]
        assert dev.peak_reserved == expected.peak_reserved
        assert replay(f, verify=True, progress=False).perfect


def _page(local_files) -> bytes:
    return ("<!DOCTYPE html><html><body><script type=\"module\">\nconst local_files = "
            + json.dumps(local_files) + "\nadd_local_files(local_files, 'x')\n</script>").encode()


class Evil:
    def __reduce__(self):
        return (print, ("ran",))


HOSTILE = {
    "a page with no snapshot": (b"<html><body>hello</body></html>", "local_files"),
    "a page whose JSON is cut": (b"<html><script>const local_files = [{\"name\": ", "not valid JSON"),
    "bad base64": (_page([{"name": "s", "base64": "!!!!"}]), "base64"),
    "two snapshots in one page": (_page([{"name": "a", "base64": ""}, {"name": "b", "base64": ""}]), "2 snapshots"),
    "a pickle with code in a page": (_page([{"name": "s", "base64": base64.b64encode(
        pickle.dumps(Evil())).decode()}]), "refused to load the global"),
    "JSON nested a million deep": (b"[" * 1_000_000 + b"]" * 1_000_000, "not valid JSON"),
    "JSON that is no snapshot": (b'{"hello": 1}', "no 'segments' list"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_pages_and_json_get_one_line(name, tmp_path, capsys):
    data, words = HOSTILE[name]
    path = tmp_path / "posted.html"
    path.write_bytes(data)
    with pytest.raises(SnapshotError) as err:
        load_recording(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and words in message and "\n" not in message
    assert main(["doctor", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0]


# ---------------------------------------------------------------- no recursion limit on blocks

def many_blocks(n: int) -> dict:
    """One segment cut into ``n`` blocks, then a free and a malloc the verify replay must read
    two ways (a free completed at once or by the retry's sync): it tries each on a copy of its
    whole state, blocks linked prev/next included."""
    a = ar.CachingAllocator(ar.SimDevice("h100-80gb"), "")
    a.record_memory_history(max_entries=1_000_000)
    big = a.malloc(n * 2 * MiB + 4 * MiB)
    a.free(big)
    held = [a.malloc(2 * MiB) for _ in range(n)]
    for x in held[::2]:
        a.free(x)
    cached = a.malloc(30 * GiB)
    a.free(cached)
    a.free(held[1])
    a.malloc(50 * GiB)                # releases the cached 30 GiB: a group read two ways
    return a.snapshot()


def test_a_segment_of_5000_blocks_verifies_and_is_doctored(tmp_path):
    snap = many_blocks(5002)
    assert max(len(s["blocks"]) for s in snap["segments"]) >= 5000
    path = save_snapshot(snap, tmp_path / "many.pickle")
    result = replay(path, verify=True, progress=False)
    assert result.perfect and result.devices[0].work > 5000      # the trial copies ran
    assert "Reproduced: yes" in str(doctor(path))


def test_copying_an_allocator_keeps_every_link():
    a = ar.CachingAllocator(ar.SimDevice("h100-80gb"), "")
    big = a.malloc(3000 * 2 * MiB)
    a.free(big)
    held = [a.malloc(2 * MiB) for _ in range(3000)]
    import copy
    twin = copy.deepcopy(a)
    blocks = sorted(twin.device_allocator.active_blocks.values(), key=lambda b: b.ptr)
    assert [b.ptr for b in blocks] == [x.ptr for x in held]
    for left, right in zip(blocks, blocks[1:]):
        assert left.next is right and right.prev is left
    originals = set(map(id, a.device_allocator.active_blocks.values()))
    assert not any(id(b) in originals for b in blocks)          # copies, not the originals


# ---------------------------------------------------------------- bigger files (the benchmark's)

def test_a_run_scaled_to_more_ranks_loads_and_every_rank_replays_as_the_original(pickled, tmp_path):
    """benchmarks/scale_snapshot.py makes the big files bench_loader.py measures: each copy is a
    device of its own records, and every one reproduces as the original does."""
    from benchmarks.scale_snapshot import write_scaled
    snap, path = pickled
    size = write_scaled(path, 3, tmp_path / "x3.pickle")
    assert size > 2.5 * path.stat().st_size                 # its own records: nothing shared by memo
    rec = load_recording(tmp_path / "x3.pickle")
    assert rec.devices == [0, 1, 2]
    original = load_recording(path).device(0)
    for d in rec.devices:
        assert [e["addr"] for e in rec.device(d).events] == [e["addr"] for e in original.events]
        assert rec.device(d).peak_reserved == original.peak_reserved
    result = replay(rec, verify=True, progress=False)
    assert result.perfect and len(result.devices) == 3


# ---------------------------------------------------------------- the streaming path (big pickles)

@pytest.fixture()
def streaming(monkeypatch):
    """Every pickle takes the streaming path (it starts at 64 MiB): opcodes checked through a
    memory map, objects built from the open file."""
    import allocator_ref.trace.snapshot as snapshot_module
    monkeypatch.setattr(snapshot_module, "STREAM_BYTES", 0)
    return snapshot_module


def test_streaming_loads_what_the_bytes_path_loads(pickled, streaming):
    snap, path = pickled
    expected = streaming.loads_snapshot(path.read_bytes(), str(path))
    assert streaming.load_snapshot(path) == expected
    assert replay(path, verify=True, progress=False).perfect


def test_streaming_refuses_what_the_bytes_path_refuses(tmp_path, streaming):
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": Evil()}))
    with pytest.raises(SnapshotError, match="refused to load the global") as err:
        streaming.load_snapshot(path)
    assert str(err.value).startswith(f"{path}: ")
    path.write_bytes(b"\x80\x04]\x94h\x00a.")                  # L = []; L.append(L)
    with pytest.raises(SnapshotError, match="refers to itself"):
        streaming.load_snapshot(path)


def test_a_file_that_changes_while_it_streams_is_refused(pickled, streaming, monkeypatch):
    _, path = pickled
    build = streaming.build_compact

    def build_then_rewrite(fd, size, plan):
        obj = build(fd, size, plan)
        path.write_bytes(path.read_bytes() + b"\0")           # another process writes to it
        return obj
    monkeypatch.setattr(streaming, "build_compact", build_then_rewrite)
    with pytest.raises(SnapshotError, match="changed while it was read"):
        streaming.load_snapshot(path)
