"""JupyterLab, started by `make lab`, lists each chapter once (the .ipynb), not twice.

Every chapter and lab source is a jupytext pair (.ipynb + MyST .md), and
jupytext opens both as notebooks: a newcomer saw every chapter twice and did
not know which to use.  `make lab` adds .jupyter-course/ to JUPYTER_CONFIG_PATH,
whose ContentsManager.hide_globs hides the .md twins from the file browser
(they stay on disk, and jupytext keeps them in sync when a notebook is saved).
"""
import json
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


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "jupyter").exists(), reason="make lab needs the course's .venv")
def test_make_lab_lists_each_chapter_once(tmp_path):
    port, token = _free_port(), secrets.token_hex(8)
    args = f"--no-browser --port {port} --ServerApp.ip=127.0.0.1 --ServerApp.token={token}"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))
    env.pop("JUPYTER_CONFIG_PATH", None)
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def get(path):
        with urllib.request.urlopen(f"{url}/api/contents/{path}?token={token}", timeout=10) as r:
            return json.loads(r.read())

    try:
        deadline = time.time() + 90
        while True:
            try:
                get("")
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
                    pytest.fail(f"JupyterLab did not answer on port {port}: {out[-2000:]}")
                time.sleep(0.5)
        for folder in ("chapters", "labs/source"):
            listed = [item["name"] for item in get(folder)["content"]]
            on_disk = sorted(p.name for p in (ROOT / folder).glob("*.ipynb"))
            assert on_disk and sorted(n for n in listed if n.endswith(".ipynb")) == on_disk
            twins = [n for n in listed if n.endswith(".md") and n[:-3] + ".ipynb" in on_disk]
            assert twins == [], f"{folder}: JupyterLab still lists the jupytext twins {twins}"
        assert "README.md" in [item["name"] for item in get("")["content"]], "other .md files stay visible"
        assert get("chapters/00_setup_and_tour.ipynb")["type"] == "notebook"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
