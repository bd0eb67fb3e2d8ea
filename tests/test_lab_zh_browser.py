"""A Chinese learner's ``make lab``, live: JupyterLab started with the command the Makefile's ``lab`` target
runs under ``LANG=zh_CN.UTF-8`` (its ``.jupyter-course-zh`` settings: the zh_CN language pack as the default
locale) shows its menus in Chinese and opens the Chinese chapter 0, in headless Chromium (Debian's
``chromium``, driven by Playwright; skipped without them, like tests/test_browser_player.py)."""
from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_browser_player import CHROMIUM, CHROMIUM_ARGS, _wait_for_server, free_port   # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[1]
# JupyterLab's top menus in English, and what the zh_CN language pack calls them
MENUS = {"File": "文件", "Edit": "编辑", "View": "查看", "Run": "运行", "Kernel": "内核", "Help": "帮助"}


def lab_command(environ: dict) -> str:
    """The shell line ``make lab`` would run in ``environ`` (``make -n``: nothing is run or installed)."""
    plan = subprocess.run(["make", "-n", "-s", "lab"], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=60)
    lines = [line for line in plan.stdout.splitlines() if " lab --notebook-dir=" in line]
    assert plan.returncode == 0 and len(lines) == 1, plan.stdout[-2000:] + plan.stderr[-2000:]
    return lines[0]


@pytest.fixture
def chinese_lab(tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: run tools/install_browser.sh (apt-get install chromium) first")
    pytest.importorskip("playwright.sync_api", reason="python playwright is not installed in this venv")
    if not list((ROOT / ".venv").glob("lib/python*/site-packages/jupyterlab_language_pack_zh_CN")):
        pytest.skip("jupyterlab-language-pack-zh-CN is not installed in .venv (pip install -e .: pyproject has it)")
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_LANG", "LC_ALL", "LC_MESSAGES", "JUPYTER_CONFIG_PATH")}
    env.update(LANG="zh_CN.UTF-8", JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "run"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), ALLOCATOR_REF_DEVICE="sim", MPLBACKEND="Agg")
    command = lab_command(env)
    assert ".jupyter-course-zh" in command and command.endswith("chapters/zh/00_setup_and_tour.ipynb"), command
    port, token = free_port(), secrets.token_hex(16)
    # the learner's command, on a loopback port with a token and no browser of its own
    command += (f" --no-browser --port={port} --ServerApp.ip=127.0.0.1 --ServerApp.port_retries=0"
                f" --IdentityProvider.token={shlex.quote(token)}"
                " --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"
                f" --FileCheckpoints.checkpoint_dir={shlex.quote(str(tmp_path / 'checkpoints'))}")   # not in chapters/zh
    log = open(tmp_path / "jupyterlab.log", "w")
    server = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(base, token, server, tmp_path / "jupyterlab.log")
        yield base, token
    finally:
        try:                                   # the server and its kernels: one process group
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait(timeout=10)
        log.close()


def test_a_chinese_make_lab_has_chinese_menus_and_opens_chinese_chapter_0(chinese_lab):
    from playwright.sync_api import sync_playwright

    base, token = chinese_lab
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            # where `jupyter lab FILE` sends the learner's browser: the file, opened in the lab
            page.goto(f"{base}/lab/tree/chapters/zh/00_setup_and_tour.ipynb?token={token}", timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-MarkdownOutput", timeout=90_000)
            menus = page.eval_on_selector_all("#jp-menu-panel .lm-MenuBar-itemLabel",
                                              "items => items.map(i => i.textContent.trim())")
            for english, chinese in MENUS.items():
                assert any(chinese in label for label in menus), f"menu {english!r} is not {chinese!r}: {menus}"
                assert english not in menus, menus
            page.wait_for_function("() => document.querySelector('.jp-Notebook')?.textContent.includes('第 0 章')",
                                   timeout=60_000)
            # the open document is the Chinese edition's file (its tab's tooltip names the path)
            tab = page.eval_on_selector("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current",
                                        "e => [e.textContent.trim(), e.getAttribute('title') || '']")
            assert tab[0] == "00_setup_and_tour.ipynb" and "chapters/zh/00_setup_and_tour.ipynb" in tab[1], tab
        finally:
            browser.close()
