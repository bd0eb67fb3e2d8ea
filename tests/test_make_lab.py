"""`make lab` (the README's first command) really starts JupyterLab on the course, headless."""
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "jupyter").exists(), reason="make lab needs the course's .venv")
def test_make_lab_serves_the_first_chapter(tmp_path):
    port, token = _free_port(), secrets.token_hex(8)
    args = f"--no-browser --port {port} --ServerApp.ip=127.0.0.1 --ServerApp.token={token}"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
                    pytest.fail(f"JupyterLab did not answer on port {port}: {out[-2000:]}")
                time.sleep(0.5)
        with urllib.request.urlopen(f"{url}/api/contents/chapters/00_setup_and_tour.ipynb?token={token}",
                                    timeout=10) as r:
            assert r.status == 200 and b'"type": "notebook"' in r.read()
        with urllib.request.urlopen(f"{url}/lab?token={token}", timeout=10) as r:
            assert r.status == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
