"""The trace player in a real browser: JupyterLab + Debian's Chromium, driven by Playwright.

What it proves: the widget renders in JupyterLab with no CDN, and pressing the
step button and Play really changes the block map on the page.

Needs /usr/bin/chromium (``tools/install_browser.sh`` installs it; the test
skips and says so when it is missing).  Every process the test starts
(JupyterLab and its kernel, the browser) is stopped even when it fails.
"""
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VENV_BIN = Path(sys.executable).parent

NOTEBOOK_CODE = """\
import allocator_ref as ar
from allocator_ref.viz import record_frames, TracePlayer
a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
with record_frames(a) as frames:
    x = a.malloc(12 * 2**20); y = a.malloc(4 * 2**20); z = a.malloc(30 * 2**20)
    a.free(y); a.free(x); a.free(z); a.empty_cache()
TracePlayer(frames, simulated=True, interval_ms=250)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(folder: Path) -> None:
    cell = {"cell_type": "code", "execution_count": None, "id": "player", "metadata": {}, "outputs": [],
            "source": NOTEBOOK_CODE.splitlines(keepends=True)}
    nb = {"cells": [cell], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (folder / "player.ipynb").write_text(json.dumps(nb))


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab server on a free loopback port, its settings in tmp_path; stopped afterwards."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: run tools/install_browser.sh (apt-get install chromium) first")
    pytest.importorskip("playwright.sync_api", reason="python playwright is not installed in this venv")
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    write_notebook(notebooks)
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "run"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), ALLOCATOR_REF_DEVICE="sim",
               MPLBACKEND="Agg")
    log = open(tmp_path / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [str(VENV_BIN / "jupyter"), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={notebooks}", "--ServerApp.port_retries=0",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        + (["--allow-root"] if os.geteuid() == 0 else []),   # CI containers run as root
        cwd=notebooks, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(base, token, server, tmp_path / "jupyterlab.log")
        yield base, token
    finally:
        # The server and the kernels it started share one process group (start_new_session above).
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=10)
        try:
            os.killpg(server.pid, signal.SIGKILL)      # a kernel that outlived the server
        except ProcessLookupError:
            pass
        log.close()


def _wait_for_server(base, token, server, log_path, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"JupyterLab exited early:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"JupyterLab did not answer within {timeout}s:\n{log_path.read_text()[-3000:]}")


def _block_states(page):
    """(caption index, [(data-addr, data-state)...]) of the player's block map on the page."""
    return page.evaluate("""() => {
        const caption = document.querySelector('.ar-trace-player .ar-caption');
        const rects = [...document.querySelectorAll('.ar-trace-player svg.ar-blockmap rect.ar-block')];
        return [caption ? Number(caption.dataset.index) : -1,
                rects.map(r => [r.dataset.addr, r.dataset.state])];
    }""")


def test_player_steps_and_plays_in_jupyterlab(jupyterlab, tmp_path):
    from playwright.sync_api import sync_playwright

    base, token = jupyterlab
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/lab/tree/player.ipynb?token={token}", timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=90_000)
            # wait until the kernel is up, then run the cell the way a learner does: Shift+Enter
            page.wait_for_function("() => (document.querySelector('#jp-main-statusbar')?.textContent || '')"
                                   ".includes('Idle')", timeout=90_000)
            page.click(".jp-Notebook .jp-Cell .cm-content")
            page.keyboard.press("Shift+Enter")
            try:        # a fresh JupyterLab may still ask which kernel to use: take the default
                page.click(".jp-Dialog .jp-mod-accept", timeout=5_000)
            except Exception:
                pass
            try:
                page.wait_for_selector(".ar-trace-player svg.ar-blockmap", timeout=120_000)
            except Exception:
                page.screenshot(path=str(tmp_path / "no-player.png"))
                raise AssertionError("the player never appeared; see no-player.png and jupyterlab.log in "
                                     f"{tmp_path}: {page.inner_text('.jp-Notebook')[-1500:]}")

            index, first = _block_states(page)
            assert index == 0 and first, "the player shows the first event's block map"

            page.click(".ar-trace-player button:has-text('next')")        # one step forward
            page.wait_for_function("() => document.querySelector('.ar-trace-player .ar-caption')"
                                   "?.dataset.index === '1'", timeout=30_000)
            index, second = _block_states(page)
            assert second != first, "stepping changed the rendered block map"

            page.click(".ar-trace-player .widget-play button >> nth=0")   # Play
            page.wait_for_function("() => Number(document.querySelector('.ar-trace-player .ar-caption')"
                                   "?.dataset.index) >= 4", timeout=60_000)
            index, later = _block_states(page)
            assert index >= 4 and later != second, "Play advanced the block map on its own"
            page.screenshot(path=str(tmp_path / "player.png"))
        finally:
            browser.close()
