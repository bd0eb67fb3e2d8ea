"""Every bad argument and every bad input file gets one clear line from the command line.

argparse's own error (exit 2) for a bad argument; ``error: ...`` on one line (exit 2) for
a bad file; a traceback only with ``--debug``.
"""
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.device import SimDevice
from allocator_ref.trace import SnapshotError, save_snapshot

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def good(tmp_path):
    allocator = ar.CachingAllocator(SimDevice("tiny-1gb"))
    allocator.record_memory_history(enabled="all")
    x = allocator.malloc(3 * 2**20)
    allocator.free(x)
    return save_snapshot(allocator.snapshot(), tmp_path / "good.pickle")


@pytest.mark.parametrize("argv, option", [
    (["replay", "{good}", "--device-memory", "inf"], "--device-memory"),
    (["replay", "{good}", "--device-memory", "nan"], "--device-memory"),
    (["replay", "{good}", "--device-memory", "-1"], "--device-memory"),
    (["replay", "{good}", "--device-memory", "0"], "--device-memory"),
    (["replay", "{good}", "--device-memory", "lots"], "--device-memory"),
    (["compare", "{good}", "--device-memory", "1e-12"], "--device-memory"),
    (["compare", "{good}", "--plot", "{tmp}/missing/plot.png"], "--plot"),
    (["compare", "{good}", "--plot", "{tmp}/plot.nonsense"], "--plot"),
    (["replay", "{good}", "--profile", "a100-1tb"], "--profile"),
    (["replay", "{good}", "--policy", "magic"], "--policy"),
])
def test_bad_arguments_are_argparse_errors(argv, option, good, tmp_path, capsys):
    argv = [a.format(good=good, tmp=tmp_path) for a in argv]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and "Traceback" not in err
    assert not (tmp_path / "missing").exists()


def hostile_files(tmp_path) -> dict:
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    files = {
        "evil": pickle.dumps(Evil()),
        "deep": b"\x80\x04}" + b")" + b"\x85" * 5000 + b"Ns.",
        "truncated": pickle.dumps({"segments": []})[:-3],
        "size-zero-alloc": pickle.dumps({"segments": [], "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": 0, "stream": 0}]]}),
        "bad-config": pickle.dumps({"segments": [], "device_traces": [[]],
                                    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "nonsense:1"}}),
    }
    paths = {}
    for name, data in files.items():
        paths[name] = tmp_path / f"{name}.pickle"
        paths[name].write_bytes(data)
    paths["missing"] = tmp_path / "nope.pickle"
    paths["folder"] = tmp_path
    fifo = tmp_path / "fifo.pickle"
    os.mkfifo(fifo)
    paths["fifo"] = fifo
    return paths


@pytest.mark.parametrize("command", [["replay"], ["replay", "--verify"], ["compare"]])
def test_bad_files_get_one_line_and_exit_2(command, tmp_path, capsys):
    for name, path in hostile_files(tmp_path).items():
        if name == "bad-config" and command == ["compare"]:
            continue             # compare sets its own configs: the file's is never used
        code = main([command[0], str(path), *command[1:]])
        err = capsys.readouterr().err
        assert code == 2, (name, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, err)
        assert "Traceback" not in err


def test_debug_shows_the_traceback(tmp_path):
    path = tmp_path / "evil.pickle"
    path.write_bytes(b"\x80\x04\x8c\x02os\x8c\x06system\x93.")
    with pytest.raises(SnapshotError, match="STACK_GLOBAL"):
        main(["--debug", "replay", str(path)])
    with pytest.raises(SnapshotError, match="STACK_GLOBAL"):
        main(["replay", str(path), "--debug"])


def test_unexpected_errors_are_one_line_with_a_hint(good, capsys, monkeypatch):
    import allocator_ref.trace.replay as replay_module

    def broken(*args, **kwargs):
        raise RuntimeError("something nobody foresaw\nsecond line")
    monkeypatch.setattr(replay_module, "replay", broken)
    assert main(["replay", str(good)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError" in err and "--debug" in err


def test_good_file_still_works(good, tmp_path, capsys):
    assert main(["replay", str(good), "--verify"]) == 0
    assert main(["compare", str(good), "--plot", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0


@pytest.mark.slow
def test_cli_survives_the_million_deep_key(tmp_path):
    """Before the opcode scan this killed the process with SIGSEGV."""
    path = tmp_path / "deep.pickle"
    path.write_bytes(b"\x80\x04}" + b")" + b"\x85" * 1_000_000 + b"Ns.")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "allocator_ref", "replay", str(path)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert run.stderr.count("\n") == 1 and "nest deeper" in run.stderr
