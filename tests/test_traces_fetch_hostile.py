"""`traces fetch` against a hostile mirror and a hostile target folder (issue 32, item 5).

Each test runs the real command, ``python -m allocator_ref traces fetch --from URL``,
against a local HTTP server that misbehaves on purpose: an endless body, a body
trickled two bytes a second, a folder where a trace should go, an unknown name.
None of them needs the real snapshots: every download here is meant to fail.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from allocator_ref.trace import fetch

ROOT = Path(__file__).resolve().parents[1]
SMALL = "small-from-empty.pickle"
FORWARD = "cs336-gpt-ctx128-forward.pickle"


class HostileMirror:
    def __init__(self, mode: str) -> None:
        self.mode, self.requests, self.sent = mode, [], 0
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_GET(self):
                mirror.requests.append(self.path)
                if mirror.mode == "slow-headers":              # a header that never ends, a byte at a time
                    try:
                        self.wfile.write(b"HTTP/1.0 200 OK\r\nX-Slow: ")
                        for _ in range(3600):
                            self.wfile.write(b"a")
                            self.wfile.flush()
                            time.sleep(0.5)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return
                self.send_response(200)
                if mirror.mode == "lying-length":
                    self.send_header("Content-Length", str(1 << 40))
                self.end_headers()
                try:
                    if mirror.mode in ("endless", "lying-length"):
                        block = b"\0" * 65536
                        while mirror.sent < 1 << 27:              # 128 MiB at most, to end the test anyway
                            self.wfile.write(block)
                            mirror.sent += len(block)
                    elif mirror.mode == "trickle":
                        for _ in range(3600):
                            self.wfile.write(b"ab")
                            self.wfile.flush()
                            mirror.sent += 2
                            time.sleep(0.5)
                    else:
                        self.wfile.write(b"not a snapshot")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fetch_cli(*args: str, target: Path, timeout: float = 120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOCATOR_REF_")}
    env.update(PYTHONPATH=str(ROOT), ALLOCATOR_REF_TRACES=str(target))
    return subprocess.run([sys.executable, "-m", "allocator_ref", "traces", "fetch", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("mode", ["endless", "lying-length"])
def test_an_endless_body_is_cut_at_the_recorded_size(tmp_path, mode):
    mirror = HostileMirror(mode)
    try:
        proc = fetch_cli("--from", mirror.url, SMALL, target=tmp_path)
    finally:
        mirror.close()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not the file the course expects" in proc.stdout, proc.stdout
    assert folder_bytes(tmp_path) == 0 and list(tmp_path.iterdir()) == []
    assert mirror.sent < 32 << 20, f"the fetch read on: the mirror sent {mirror.sent:,} bytes"


def test_a_trickling_mirror_meets_the_deadline(tmp_path):
    mirror = HostileMirror("trickle")
    started = time.monotonic()
    try:
        proc = fetch_cli("--from", mirror.url, "--deadline", "3", SMALL, target=tmp_path, timeout=90)
    finally:
        mirror.close()
    took = time.monotonic() - started
    assert proc.returncode == 1 and "deadline" in proc.stdout, proc.stdout + proc.stderr
    assert took < 60, f"the fetch took {took:.0f} s against a 3 s deadline"
    assert list(tmp_path.iterdir()) == []


def test_a_mirror_trickling_its_headers_meets_the_deadline(tmp_path):
    mirror = HostileMirror("slow-headers")
    started = time.monotonic()
    try:
        proc = fetch_cli("--from", mirror.url, "--deadline", "3", SMALL, target=tmp_path, timeout=90)
    finally:
        mirror.close()
    took = time.monotonic() - started
    assert proc.returncode == 1 and "deadline" in proc.stdout, proc.stdout + proc.stderr
    assert took < 30, f"the fetch took {took:.0f} s against a 3 s deadline"
    assert list(tmp_path.iterdir()) == []


def test_a_trickling_mirror_meets_the_whole_fetchs_deadline(tmp_path):
    # Before: each file had its own deadline and nothing bounded them together: two files trickled
    # two bytes a second took two per-file deadlines (60 s here), past any overall timeout.
    mirror = HostileMirror("trickle")
    started = time.monotonic()
    try:
        proc = fetch_cli("--from", mirror.url, "--deadline", "30", "--total-deadline", "3", SMALL, FORWARD,
                         target=tmp_path, timeout=60)
    finally:
        mirror.close()
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert took < 20, f"the fetch took {took:.0f} s against a 3 s overall deadline"
    failed = [line for line in proc.stdout.splitlines() if "FAILED" in line]
    assert len(failed) == 2 and all("whole fetch's deadline" in line for line in failed), proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_the_whole_fetchs_default_deadline_is_one_download_of_every_file():
    sizes = [t.size for t in fetch.TRACES]
    assert fetch.total_deadline_for(sizes) == fetch.deadline_for(sum(sizes))
    assert fetch.total_deadline_for(sizes) < sum(fetch.deadline_for(s) for s in sizes)
    assert sum(sizes) / fetch.total_deadline_for(sizes) < 16 << 10    # a 16 KiB/s link still finishes


def test_the_default_deadline_covers_a_slow_honest_link():
    size = max(t.size for t in fetch.TRACES)
    assert size / fetch.deadline_for(size) < 16 << 10          # a 16 KiB/s link still finishes
    assert fetch.deadline_for(size) < 3600                      # but not hours


def test_a_folder_at_a_traces_name_fails_that_one_and_the_others_are_tried(tmp_path):
    (tmp_path / SMALL).mkdir()
    (tmp_path / SMALL / "keep.txt").write_text("mine")
    mirror = HostileMirror("short")
    try:
        proc = fetch_cli("--from", mirror.url, SMALL, FORWARD, target=tmp_path)
    finally:
        mirror.close()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{SMALL} is a folder" in proc.stdout.replace(str(tmp_path) + "/", ""), proc.stdout
    assert any(fetch.BY_NAME[FORWARD].path in r for r in mirror.requests), mirror.requests   # tried
    assert (tmp_path / SMALL / "keep.txt").read_text() == "mine"


def test_an_unknown_trace_name_is_a_usage_error(tmp_path):
    proc = fetch_cli("no-such.pickle", target=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: no real trace named 'no-such.pickle'") and "--debug" not in proc.stderr
    assert SMALL in proc.stderr and proc.stdout == ""


def test_a_bad_deadline_is_refused():
    proc = subprocess.run([sys.executable, "-m", "allocator_ref", "traces", "fetch", "--deadline", "nan"],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "seconds above 0" in proc.stderr
