"""Hostile settings (issue 32, items 4 and 6): whatever a settings file or variable holds,
the course reports one settings error naming the file (or variable) and what to do,
and a lookup costs one parse per change of the file, not one per setting asked."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from allocator_ref import settings

ROOT = Path(__file__).resolve().parents[1]


def run(env_extra: dict, cwd: Path, *args: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOCATOR_REF_")}
    env.update(PYTHONPATH=str(ROOT), ALLOCATOR_REF_DEVICE="sim", **env_extra)
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def describe(env_extra: dict, cwd: Path):
    # Under a 2 GiB address-space limit, so a parser that runs away fails here, not the machine.
    return run(env_extra, cwd, "-c", "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
               "from allocator_ref import settings; print(settings.describe())")


def hostile_files(tmp: Path) -> dict:
    deep_array = tmp / "deep-array.toml"
    deep_array.write_text("[course]\nprofile = " + "[" * 100_000 + "]" * 100_000 + "\n")
    deep_table = tmp / "deep-table.toml"
    deep_table.write_text("[course]\nprofile = " + "{a = " * 50_000 + "1" + "}" * 50_000 + "\n")
    huge = tmp / "huge.toml"
    with open(huge, "w") as f:
        f.write("[course]\n")
        f.write("# " + "x" * (8 << 20) + "\n")
    dotted = tmp / "dotted.toml"                  # tomllib is quadratic here: this one took the machine's memory
    dotted.write_text("[course]\nprofile = { " + "a." * 100_000 + "b = 1 }\n")
    return {"deep array": deep_array, "deep inline table": deep_table, "8 MiB comment": huge,
            "dotted keys 100,000 deep": dotted}


@pytest.mark.parametrize("case, reason", [("deep array", "nested too deep"), ("deep inline table", "nested too deep"),
                                          ("8 MiB comment", "is refused"), ("dotted keys 100,000 deep", "dots")])
def test_a_hostile_settings_file_is_one_settings_error_naming_it(tmp_path, case, reason):
    path = hostile_files(tmp_path)[case]
    proc = describe({"ALLOCATOR_REF_SETTINGS": str(path)}, tmp_path)
    assert proc.returncode == 1 and "SettingsError" in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("allocator_ref.settings.SettingsError") and str(path) in last, last
    assert reason in last, last                  # the reason itself, not "not enough memory"
    assert "RecursionError" not in proc.stderr and "MemoryError" not in proc.stderr


@pytest.mark.parametrize("named, words", [
    ("x" * 5000 + ".toml", "cannot use this path"),
    ("~nosuchuser-h32/course-settings.toml", "cannot use this path"),
    ("/etc", "is not a file"),
])
def test_a_hostile_settings_variable_is_one_settings_error_naming_it(tmp_path, named, words):
    proc = describe({"ALLOCATOR_REF_SETTINGS": named}, tmp_path)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("allocator_ref.settings.SettingsError") and settings.FILE_ENV in last, proc.stderr
    assert words in last and len(last) < 600, last


def test_the_cli_reports_a_hostile_settings_file_as_a_usage_error(tmp_path):
    path = hostile_files(tmp_path)["deep array"]
    proc = run({"ALLOCATOR_REF_SETTINGS": str(path)}, tmp_path, "-m", "allocator_ref", "traces", "list")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and str(path) in proc.stderr and "--debug" not in proc.stderr


def test_the_file_is_parsed_once_per_change_not_once_per_lookup(tmp_path, monkeypatch):
    for env_name, _ in settings.SETTINGS.values():
        monkeypatch.delenv(env_name, raising=False)
    path = tmp_path / settings.FILE_NAME
    path.write_text('[course]\nprofile = "t4-16gb"\n# ' + "x" * 100_000 + "\n")
    monkeypatch.setenv(settings.FILE_ENV, str(path))
    calls = []
    real = settings.tomllib.loads
    monkeypatch.setattr(settings.tomllib, "loads", lambda text: calls.append(1) or real(text))
    settings.describe()
    settings.describe()
    assert len(calls) == 1, f"{len(calls)} parses for two describe() calls"
    path.write_text('[course]\nprofile = "tiny-1gb"\n')          # a change is seen at once
    assert settings.value("profile") == "tiny-1gb" and len(calls) == 2
