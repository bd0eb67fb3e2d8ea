"""Every setting error is the settings error (issue 41): whatever a variable the course reads holds,
what escapes is one SettingsError naming that variable (or file) and what to do, from the settings
API and from the CLI (a usage error, exit 2), never a RuntimeError from deep inside.

Before: ALLOCATOR_REF_TRACES=~nosuchuser/x raised an uncaught RuntimeError (Path.expanduser), as did
XDG_CACHE_HOME=~nosuchuser/x; a bad device or profile was a plain ValueError from open_device.
ALLOCATOR_REF_MAX_SNAPSHOT_MB=lots raised the snapshot loader's SnapshotError, and
ALLOCATOR_REF_LAB_QUICK took any value at all (read straight from os.environ): both are settings now.
The variables tested are every ALLOCATOR_REF_* name the package's source holds, so a new one
cannot skip this.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BAD = [
    ("ALLOCATOR_REF_TRACES", "~nosuchuser-h41/traces", "cannot be used as a folder"),
    ("ALLOCATOR_REF_TRACES", "t" * 5000, "cannot be used as a folder"),
    ("ALLOCATOR_REF_DEVICE", "gpu", "auto, sim, cuda"),
    ("ALLOCATOR_REF_PROFILE", "a100", "h100-80gb"),
    ("ALLOCATOR_REF_PROFILE", "../profiles/h100-80gb", "h100-80gb"),
    ("ALLOCATOR_REF_LAB_SEED", "twelve", "'user' or a whole number"),
    ("ALLOCATOR_REF_LAB_SEED", "9" * 5000, "'user' or a whole number"),
    ("ALLOCATOR_REF_SETTINGS", "~nosuchuser-h41/course-settings.toml", "cannot use this path"),
    ("XDG_CACHE_HOME", "~nosuchuser-h41/cache", "cannot be used for the traces cache"),
    ("ALLOCATOR_REF_MAX_SNAPSHOT_MB", "lots", "positive number of MiB"),
    ("ALLOCATOR_REF_MAX_SNAPSHOT_MB", "-5", "positive number of MiB"),
    ("ALLOCATOR_REF_MAX_SNAPSHOT_MB", "inf", "positive number of MiB"),
    ("ALLOCATOR_REF_LAB_QUICK", "yes", "must be 1"),
    ("ALLOCATOR_REF_LANG", "klingon", "auto, en, zh"),
    ("ALLOCATOR_REF_GRADER_PYTHON", "python3", "absolute path to a Python"),
    ("ALLOCATOR_REF_GRADER_PYTHON", "bin/python", "absolute path to a Python"),
    ("ALLOCATOR_REF_LIVE_VIEW", "yes", "must be 1"),
    ("ALLOCATOR_REF_WORKERS", "0", "whole number of processes"),
    ("ALLOCATOR_REF_WORKERS", "all", "whole number of processes"),
]
# Each variable read where the course reads it: the settings, the traces' folders, the device, the
# snapshot loader's cap, the lab checker's quick mode.
LOOKUP = ("from allocator_ref import settings; from allocator_ref.trace import fetch; "
          "from allocator_ref.device import open_device; from allocator_ref.trace.snapshot import max_snapshot_bytes; "
          "from allocator_ref.labs.check import quick; from allocator_ref.editions.language import language; "
          "print(fetch.search_dirs()); open_device('sim'); max_snapshot_bytes(); quick(); language(); "
          "print(settings.describe())")


def test_every_variable_the_package_reads_is_tested_here():
    """Every ALLOCATOR_REF_* name in the package's source is a course setting (or the settings
    file's own variable) and has a bad value above: a new variable cannot skip the settings error."""
    import re
    from allocator_ref import settings
    found = {name for path in (ROOT / "allocator_ref").rglob("*.py")
             for name in re.findall(r"ALLOCATOR_REF_[A-Z][A-Z0-9_]*", path.read_text(encoding="utf-8"))}
    assert found, "no ALLOCATOR_REF_* variable found in the source: the search is broken"
    assert found <= settings.ENV_NAMES | {settings.FILE_ENV}, (
        f"{sorted(found - settings.ENV_NAMES - {settings.FILE_ENV})}: read outside allocator_ref/settings.py; "
        "make each a setting there (SETTINGS, and a check in CHECKS)")
    assert found <= {variable for variable, _, _ in BAD}, f"{sorted(found - {v for v, _, _ in BAD})}: add a bad value to BAD"


def run(env_extra: dict, *args: str, cwd: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOCATOR_REF_") and k != "XDG_CACHE_HOME"}
    env.update(PYTHONPATH=str(ROOT), **env_extra)
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("variable, value, words", BAD, ids=[f"{v}={x[:30]}" for v, x, _ in BAD])
def test_a_bad_value_of_every_variable_is_one_settings_error_naming_it(variable, value, words, tmp_path):
    proc = run({variable: value}, "-c", LOOKUP, cwd=tmp_path)
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert proc.returncode == 1 and last.startswith("allocator_ref.settings.SettingsError"), proc.stderr[-1500:]
    assert variable in last and words in last and len(last) < 1000, last


READ_BY_TRACES_LIST = [b for b in BAD if b[0] in ("ALLOCATOR_REF_TRACES", "ALLOCATOR_REF_SETTINGS", "XDG_CACHE_HOME")]


@pytest.mark.parametrize("variable, value, words", READ_BY_TRACES_LIST,
                         ids=[f"{v}={x[:30]}" for v, x, _ in READ_BY_TRACES_LIST])
def test_the_cli_reports_every_bad_value_it_reads_as_a_usage_error(variable, value, words, tmp_path):
    proc = run({variable: value}, "-m", "allocator_ref", "traces", "list", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr[-1500:]
    assert variable in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("line, words", [
    ('traces = "a\\u0000b"', "cannot be used as a folder"),
    ('device = "gpu"', "auto, sim, cuda"),
    ('profile = "t4"', "t4-16gb"),
    ('lab_seed = "twelve"', "'user' or a whole number"),
    ('max_snapshot_mb = "lots"', "positive number of MiB"),
    ("max_snapshot_mb = 0", "positive number of MiB"),
    ('lab_quick = "yes"', "must be 1"),
    ('grader_python = "python3"', "absolute path to a Python"),
    ("live_view = 2", "must be 1"),
    ("workers = -2", "whole number of processes"),
])
def test_a_bad_value_in_the_settings_file_names_the_key_and_the_file(line, words, tmp_path):
    (tmp_path / "course-settings.toml").write_text(f"[course]\n{line}\n")
    proc = run({}, "-c", LOOKUP, cwd=tmp_path)
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert last.startswith("allocator_ref.settings.SettingsError"), proc.stderr[-1500:]
    key = line.split(" =")[0]
    assert f"{key}=" in last and "course-settings.toml" in last and words in last, last


def test_good_values_still_pass(tmp_path):
    proc = run({"ALLOCATOR_REF_TRACES": "~/traces", "ALLOCATOR_REF_DEVICE": " SIM ", "ALLOCATOR_REF_LAB_SEED": "42",
                "ALLOCATOR_REF_PROFILE": "t4-16gb"}, "-c", LOOKUP, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert str(Path.home() / "traces") in proc.stdout
