"""The course's one settings place: environment > course-settings.toml > default."""
from __future__ import annotations

import pytest

from allocator_ref import settings
from allocator_ref.device import open_device
from allocator_ref.labs.check import resolve_seed


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for env_name, _ in settings.SETTINGS.values():
        monkeypatch.delenv(env_name, raising=False)
    monkeypatch.delenv(settings.FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_without_file_or_environment(clean_env):
    assert settings.get("profile") == settings.Setting("profile", "h100-80gb", "default")
    assert settings.value("device") == "auto"


def test_file_found_from_a_subfolder_and_used_by_open_device(clean_env, capsys):
    (clean_env / settings.FILE_NAME).write_text('[course]\nprofile = "t4-16gb"\ndevice = "sim"\n')
    sub = clean_env / "chapters"
    sub.mkdir()
    setting = settings.get("profile", start=sub)
    assert setting.value == "t4-16gb" and settings.FILE_NAME in setting.source
    dev = open_device()                       # cwd is the course root here
    assert dev.info.total_memory == open_device("sim", "t4-16gb").info.total_memory
    assert "t4-16gb" in capsys.readouterr().out


def test_environment_beats_file(clean_env, monkeypatch):
    (clean_env / settings.FILE_NAME).write_text('[course]\nprofile = "t4-16gb"\n')
    monkeypatch.setenv("ALLOCATOR_REF_PROFILE", "tiny-1gb")
    assert settings.get("profile").source == "ALLOCATOR_REF_PROFILE"
    assert settings.value("profile") == "tiny-1gb"


def test_lab_seed_from_file_and_user_default(clean_env):
    assert resolve_seed() == resolve_seed()             # derived from the user name
    (clean_env / settings.FILE_NAME).write_text("[course]\nlab_seed = 1234\n")
    assert resolve_seed() == 1234
    assert resolve_seed(7) == 7
    (clean_env / settings.FILE_NAME).write_text('[course]\nlab_seed = "twelve"\n')
    with pytest.raises(settings.SettingsError, match="lab_seed='twelve'"):
        resolve_seed()


@pytest.mark.parametrize("text, message", [
    ('[course]\nprofle = "t4-16gb"\n', "unknown setting 'profle'"),
    ('profile = "t4-16gb"\n', r"\[course\] table"),
    ("[course]\nprofile = true\n", "must be a string"),
    ("[course\n", "cannot read"),
])
def test_bad_file_names_the_problem(clean_env, text, message):
    (clean_env / settings.FILE_NAME).write_text(text)
    with pytest.raises(settings.SettingsError, match=message):
        settings.value("profile")


def test_named_file_must_exist(clean_env, monkeypatch):
    monkeypatch.setenv(settings.FILE_ENV, str(clean_env / "nope.toml"))
    with pytest.raises(settings.SettingsError, match="is not a file"):
        settings.value("profile")
