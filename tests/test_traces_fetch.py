"""`python -m allocator_ref traces fetch`: real snapshots downloaded, verified, cached; failures said plainly.

This machine reaches no host but itself, so the "internet" here is a local
HTTP server on 127.0.0.1 laid out like raw.githubusercontent.com
(``/<owner>/<repo>/<commit>/<path>``) and serving the real files from
``../shared/traces``.  It can also misbehave on purpose: serve one file with
a flipped byte (corrupted), close the connection halfway through one (dropped),
or not listen at all (offline).  Whatever happens, the target folder ends up
holding only complete files whose sha256 matches the course's record.

The tests skip, saying why, where ``../shared/traces`` is absent (a learner's
clone); ALLOCATOR_REF_SHARED_TRACES names another copy (e.g. from a git worktree).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from allocator_ref.trace import fetch

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path(os.environ.get("ALLOCATOR_REF_SHARED_TRACES") or fetch.shared_dir())
HAVE_SOURCE = all((SOURCE / t.name).is_file() for t in fetch.TRACES)
pytestmark = pytest.mark.skipif(not HAVE_SOURCE, reason=(
    f"the real snapshots are not in {SOURCE} (a clone without ../shared/traces): "
    f"nothing to serve from the local test server"))

SMALL = "small-from-empty.pickle"
FORWARD = "cs336-gpt-ctx128-forward.pickle"


class Mirror:
    """A local stand-in for raw.githubusercontent.com, with switchable faults per file."""

    def __init__(self):
        self.by_path = {f"/{t.repo}/{t.commit}/{t.path}": t.name for t in fetch.TRACES}
        self.corrupt: set[str] = set()
        self.drop: set[str] = set()
        self.requests: list[str] = []
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):          # keep pytest's output clean
                pass

            def do_GET(self):
                name = mirror.by_path.get(self.path)
                mirror.requests.append(name or self.path)
                if name is None:
                    self.send_error(404, "Not Found")
                    return
                body = (SOURCE / name).read_bytes()
                if name in mirror.corrupt:
                    body = body[:100] + bytes([body[100] ^ 0xFF]) + body[101:]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if name in mirror.drop:                 # half the body, then hang up
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror():
    m = Mirror()
    yield m
    m.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in {t.name for t in fetch.TRACES})


def test_recorded_checksums_match_the_real_files():
    """The sha256 and sizes recorded in the package are those of the files PROVENANCE.md lists."""
    for t in fetch.TRACES:
        path = SOURCE / t.name
        assert (path.stat().st_size, _sha(path)) == (t.size, t.sha256), t.name
    provenance = (SOURCE / "PROVENANCE.md").read_text(encoding="utf-8")
    for t in fetch.TRACES:
        assert f"| {t.name} | {t.repo} | {t.commit} | {t.path} | {t.sha256} |" in provenance, t.name


def test_fetch_all_then_again(mirror, tmp_path):
    lines = []
    report = fetch.fetch(target=tmp_path, base_url=mirror.url, say=lines.append)
    assert report.ok and sorted(report.fetched) == sorted(t.name for t in fetch.TRACES)
    for t in fetch.TRACES:
        assert (tmp_path / t.name).read_bytes() == (SOURCE / t.name).read_bytes()
    assert _leftovers(tmp_path) == []
    assert len(mirror.requests) == len(fetch.TRACES)
    again = fetch.fetch(target=tmp_path, base_url=mirror.url, say=lines.append)
    assert again.ok and again.fetched == [] and len(again.already) == len(fetch.TRACES)
    assert len(mirror.requests) == len(fetch.TRACES), "a verified file must not be downloaded again"


def test_corrupted_download_is_refused_and_not_kept(mirror, tmp_path):
    mirror.corrupt.add(SMALL)
    lines = []
    report = fetch.fetch([SMALL, FORWARD], target=tmp_path, base_url=mirror.url, say=lines.append)
    assert report.fetched == [FORWARD]
    assert "sha256 mismatch" in report.failed[SMALL]
    assert not (tmp_path / SMALL).exists() and _leftovers(tmp_path) == []
    assert any("FAILED" in line and SMALL in line for line in lines)


def test_dropped_connection_keeps_nothing_half_written(mirror, tmp_path):
    mirror.drop.add(FORWARD)
    report = fetch.fetch([FORWARD], target=tmp_path, base_url=mirror.url, say=lambda _: None)
    why = report.failed[FORWARD]
    half = fetch.BY_NAME[FORWARD].size // 2
    assert "dropped" in why and f"{half:,}" in why, why
    assert list(tmp_path.iterdir()) == []


def test_a_bad_file_already_in_the_cache_is_replaced_not_used(mirror, tmp_path):
    (tmp_path / SMALL).write_bytes(b"half a file")
    assert fetch.verified(tmp_path / SMALL, fetch.BY_NAME[SMALL]) is False
    report = fetch.fetch([SMALL], target=tmp_path, base_url=mirror.url, say=lambda _: None)
    assert report.fetched == [SMALL] and _sha(tmp_path / SMALL) == fetch.BY_NAME[SMALL].sha256


def test_offline_and_missing_files_say_why(tmp_path, mirror):
    closed = Mirror()
    url = closed.url
    closed.close()                                   # nothing listens there any more: "offline"
    report = fetch.fetch([SMALL], target=tmp_path, base_url=url, say=lambda _: None)
    assert "cannot reach" in report.failed[SMALL] and "offline" in report.failed[SMALL]
    report = fetch.fetch([SMALL], target=tmp_path, base_url=mirror.url + "/nowhere", say=lambda _: None)
    assert "HTTP 404" in report.failed[SMALL]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyError, match="the course knows"):
        fetch.fetch(["no-such.pickle"], target=tmp_path)


def _cli(args, env_extra, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    return subprocess.run([sys.executable, "-m", "allocator_ref", "traces", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_fetches_into_the_xdg_cache_and_the_course_finds_them(mirror, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    out = _cli(["fetch", "--from", mirror.url, SMALL], env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    cached = tmp_path / "xdg" / "allocator-ref" / "traces" / SMALL
    assert cached.is_file() and "fetched" in out.stdout and str(cached.parent) in out.stdout
    listed = _cli(["list"], env, tmp_path)
    assert f"{SMALL:<36} {cached}" in listed.stdout, listed.stdout


def test_cli_failure_exit_code_and_message(mirror, tmp_path):
    mirror.drop.add(SMALL)
    out = _cli(["fetch", "--from", mirror.url, SMALL], {"ALLOCATOR_REF_TRACES": str(tmp_path / "t")}, tmp_path)
    assert out.returncode == 1
    assert "dropped" in out.stdout and "nothing partial was kept" in out.stdout
    assert list((tmp_path / "t").iterdir()) == []


def test_lookup_order_setting_then_cache_then_shared(tmp_path, monkeypatch):
    setting, xdg = tmp_path / "setting", tmp_path / "xdg"
    cache = xdg / "allocator-ref" / "traces"
    for d in (setting, cache):
        d.mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.setattr(fetch, "shared_dir", lambda: SOURCE)
    monkeypatch.setenv("ALLOCATOR_REF_TRACES", str(setting))
    assert fetch.find_trace(SMALL) == SOURCE / SMALL              # only ../shared/traces has it
    (cache / SMALL).write_bytes((SOURCE / SMALL).read_bytes())
    assert fetch.find_trace(SMALL) == cache / SMALL
    (setting / SMALL).write_bytes(b"corrupt")                      # never used: wrong sha256
    assert fetch.find_trace(SMALL) == cache / SMALL
    (setting / SMALL).write_bytes((SOURCE / SMALL).read_bytes())
    assert fetch.find_trace(SMALL) == setting / SMALL
    monkeypatch.setattr(fetch, "shared_dir", lambda: tmp_path / "none")
    for d in (setting, cache):
        (d / SMALL).unlink()
    assert fetch.find_trace(SMALL) is None
    with pytest.raises(fetch.TraceNotFound, match="traces fetch"):
        fetch.require_trace(SMALL)


def test_setting_none_turns_real_traces_off(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "shared_dir", lambda: SOURCE)
    monkeypatch.setenv("ALLOCATOR_REF_TRACES", "none")
    assert fetch.search_dirs() == [] and fetch.find_trace(SMALL) is None
    with pytest.raises(ValueError, match="turns the real snapshots off"):
        fetch.fetch([SMALL])
    out = _cli(["fetch", SMALL], {"ALLOCATOR_REF_TRACES": "none"}, tmp_path)
    assert out.returncode == 2 and "turned off" in out.stdout


def test_a_killed_fetchs_leftovers_are_cleaned_not_used(mirror, tmp_path):
    stale = tmp_path / f".{SMALL}.abc123.part"
    stale.write_bytes((SOURCE / SMALL).read_bytes()[:100])
    fresh = tmp_path / f".{SMALL}.xyz789.part"          # another fetch, still running: left alone
    fresh.write_bytes(b"in progress")
    old = os.path.getmtime(stale) - 2 * fetch.STALE_PART_S
    os.utime(stale, (old, old))
    assert fetch.find_trace(SMALL) is None or fetch.find_trace(SMALL).parent != tmp_path
    report = fetch.fetch([SMALL], target=tmp_path, base_url=mirror.url, say=lambda _: None)
    assert report.fetched == [SMALL] and not stale.exists() and fresh.exists()
