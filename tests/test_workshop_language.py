"""A room's language (workshop/room_language.py): the chapter learners land on and the language the
tools speak, set by WORKSHOP_LANGUAGE or the course-settings.toml ``language`` key.

The hub's own config is loaded as JupyterHub loads it (as tests/test_workshop_hub.py does; skipped
with the reason where the hub's proxy is not installed), and what it hands a learner -- the settings
file -- is read by allocator_ref itself, which then speaks the room's language.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from allocator_ref.editions import language as lang

ROOT = Path(__file__).resolve().parents[1]
WORKSHOP = ROOT / "workshop"
sys.path.insert(0, str(WORKSHOP))
import room_language as room  # noqa: E402


@pytest.fixture(autouse=True)
def _no_room(plain_language, monkeypatch):
    for name in ("WORKSHOP_LANGUAGE", "WORKSHOP_SETTINGS"):
        monkeypatch.delenv(name, raising=False)


def _settings(folder: Path, language: str | None = None) -> Path:
    text = (WORKSHOP / "course-settings.toml").read_text()
    if language is not None:
        text = text.replace('language = "auto"', f'language = "{language}"')
    path = folder / "course-settings.toml"
    path.write_text(text)
    return path


def test_the_room_is_english_unless_asked(tmp_path):
    settings = _settings(tmp_path)
    assert room.room_language(settings, {}) == "en"
    assert room.first_page("en") == "chapters/00_setup_and_tour.ipynb"
    assert room.room_settings(settings, room.asked_language({}), tmp_path) == settings


@pytest.mark.parametrize("value", ["zh", "zh_CN", "zh-CN", "ZH"])
def test_the_variable_makes_a_chinese_room(tmp_path, value):
    settings = _settings(tmp_path, "en")                   # the file says en: the variable wins
    env = {"WORKSHOP_LANGUAGE": value}
    assert room.room_language(settings, env) == "zh"
    assert (ROOT / room.first_page("zh")).is_file() and room.first_page("zh").startswith("chapters/zh/")


def test_the_settings_file_makes_a_chinese_room(tmp_path):
    assert room.room_language(_settings(tmp_path, "zh"), {}) == "zh"


def test_a_language_the_course_does_not_speak_is_refused(tmp_path):
    with pytest.raises(room.RoomLanguageError, match="WORKSHOP_LANGUAGE='fr' .*en or zh"):
        room.room_language(_settings(tmp_path), {"WORKSHOP_LANGUAGE": "fr"})


def test_the_tools_speak_the_rooms_language(tmp_path, monkeypatch):
    """What a learner's kernel sees: ALLOCATOR_REF_SETTINGS pointing at the room's settings."""
    settings = _settings(tmp_path)
    handed = room.room_settings(settings, room.asked_language({"WORKSHOP_LANGUAGE": "zh"}), tmp_path)
    assert handed != settings and 'language = "zh"' in handed.read_text()
    assert 'profile = "h100-80gb"' in handed.read_text()             # the rest of the room's settings kept
    work = tmp_path / "chapters"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("ALLOCATOR_REF_SETTINGS", str(handed))
    assert lang.language() == "zh"
    from allocator_ref.memory_doctor import examples
    import allocator_ref as ar
    assert "结论" in ar.doctor(examples.shortage_run(900)).text()
    english = room.room_settings(settings, "en", tmp_path)            # an English room ...
    monkeypatch.setenv("ALLOCATOR_REF_SETTINGS", str(english))
    lang.forget()                                                     # the same file, rewritten: decide afresh
    assert lang.language() == "en"
    (work / lang.MARKER).write_text("zh\n")                           # ... still speaks Chinese in chapters/zh
    lang.forget()
    assert lang.language() == "zh"


def test_make_pull_link_follows_the_room(tmp_path):
    from urllib.parse import parse_qs, urlparse
    settings = _settings(tmp_path, "zh")
    env = dict(os.environ, WORKSHOP_SETTINGS=str(settings))
    out = subprocess.run([sys.executable, str(WORKSHOP / "pull.py"), "--link", "https://hub.example.org",
                          str(ROOT), "main"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    query = parse_qs(urlparse(out.stdout.strip()).query)
    assert query["urlpath"] == ["lab/tree/allocator-course/chapters/zh/00_setup_and_tour.ipynb"]


PROXY = WORKSHOP / "node_modules" / ".bin" / "configurable-http-proxy"


@pytest.mark.slow
@pytest.mark.parametrize("asked, page, said", [
    (None, "chapters/00_setup_and_tour.ipynb", "auto"),
    ("zh", "chapters/zh/00_setup_and_tour.ipynb", "zh"),
])
def test_the_hub_lands_a_room_on_its_chapter_0(tmp_path, asked, page, said):
    """jupyterhub_config.py loaded as JupyterHub loads it: default_url and the settings it hands out."""
    if not PROXY.exists():
        pytest.skip(f"{PROXY} missing: npm ci --prefix workshop (make test does it when npm exists)")
    if os.getuid() != 0:
        pytest.skip("the hub's config refuses to load without root (it makes one Unix user per learner)")
    pytest.importorskip("jupyterhub", reason="pip install '.[workshop]'")
    base = Path(tempfile.mkdtemp(prefix="workshop-lang-"))
    try:
        base.chmod(0o755)
        copy = base / "workshop"
        shutil.copytree(WORKSHOP, copy, ignore=shutil.ignore_patterns("node_modules", ".run", "__pycache__"))
        (copy / "node_modules").symlink_to(WORKSHOP / "node_modules")
        for p in [copy, *copy.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | 0o004 | (0o001 if p.is_dir() else 0))
        secret = tmp_path / "admin-password"
        secret.touch(mode=0o600)
        secret.write_text("a-long-enough-instructor-password")
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSHOP_")}
        env.update(WORKSHOP_STATE=str(tmp_path / "state"), WORKSHOP_HOMES=str(base / "homes"),
                   WORKSHOP_ADMIN_PASSWORD_FILE=str(secret), WORKSHOP_PYTHON="/usr/bin/python3",
                   WORKSHOP_REPO="https://example.org/course.git", WORKSHOP_HOSTNAME="localhost",
                   WORKSHOP_TLS="off", WORKSHOP_IP="127.0.0.1", PYTHONPATH=str(ROOT))
        if asked:
            env["WORKSHOP_LANGUAGE"] = asked
        code = ("from traitlets.config import Config; import sys, tomllib; c = Config(); f = sys.argv[1]\n"
                "exec(compile(open(f).read(), f, 'exec'), {'get_config': lambda: c, '__file__': f})\n"
                "print(c.Spawner.default_url)\n"
                "s = c.Spawner.environment['ALLOCATOR_REF_SETTINGS']\n"
                "print(tomllib.load(open(s, 'rb'))['course']['language'])")
        out = subprocess.run([sys.executable, "-c", code, str(copy / "jupyterhub_config.py")], env=env,
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out.stderr
        url, language = out.stdout.split()[-2:]
        assert url == f"/lab/tree/allocator-course/{page}" and language == said
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_every_line_the_room_shows_a_learner_is_in_both_languages():
    """room_language.LEARNER_LINES: each line in English and Chinese, with the same fields."""
    import string
    for key, lines in room.LEARNER_LINES.items():
        assert set(lines) == {"en", "zh"}, key
        fields = [{f for _, f, _, _ in string.Formatter().parse(text) if f} for text in lines.values()]
        assert fields[0] == fields[1], key
        assert "\n" not in lines["en"] + lines["zh"], key
    assert room.learner_line("not_a_learner", "zh", user="root").startswith("root 不是本次工作坊的账号")
    assert room.learner_line("no_copy", "en").startswith("your copy of the course could not be made")


def test_the_hub_tells_a_learner_why_in_the_rooms_language(monkeypatch):
    """What the hub raises at a learner's start is shown on their page: each is a learner_line (git's
    words go to the hub's log); the live view refuses a learner in the room's language."""
    import ast
    tree = ast.parse((WORKSHOP / "jupyterhub_config.py").read_text())
    raised = [node.exc for node in ast.walk(tree) if isinstance(node, ast.Raise)
              and isinstance(node.exc, ast.Call) and getattr(node.exc.func, "id", "") == "RuntimeError"]
    assert len(raised) >= 2
    for exc in raised:
        assert isinstance(exc.args[0], ast.Call) and exc.args[0].func.id == "learner_line", ast.unparse(exc)
    import live_view
    monkeypatch.setenv("WORKSHOP_LANGUAGE", "zh")
    assert live_view.refusal() == room.LEARNER_LINES["instructor_only"]["zh"]
    monkeypatch.setenv("WORKSHOP_LANGUAGE", "en")
    assert live_view.refusal().startswith("the live view is the instructor's")
