"""`make test` checks the same things whatever a workshop set for its learners.

tests/conftest.py clears every ALLOCATOR_REF_* setting variable and points
ALLOCATOR_REF_SETTINGS at tests/course-settings.toml.  Here the suite is run
again in a child pytest with a hostile environment (another profile, a forced
CUDA device, a settings file of its own) and must still see its pinned values.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from allocator_ref import settings

ROOT = Path(__file__).resolve().parents[1]
PINNED = ROOT / "tests" / "course-settings.toml"


def test_the_suite_sees_its_pinned_settings():
    assert settings.get("profile").value == "h100-80gb"
    assert settings.get("device").value == "auto"
    assert settings.get("traces").value == ""
    for name in settings.SETTINGS:
        assert str(PINNED) in settings.get(name).source, (name, settings.get(name).source)


def test_a_workshops_environment_does_not_reach_the_suite(tmp_path):
    hostile = tmp_path / settings.FILE_NAME
    hostile.write_text('[course]\nprofile = "tiny-1gb"\ndevice = "cuda"\nlab_seed = 99\n')
    env = dict(os.environ, ALLOCATOR_REF_PROFILE="t4-16gb", ALLOCATOR_REF_DEVICE="cuda",
               ALLOCATOR_REF_LAB_SEED="5", ALLOCATOR_REF_TRACES=str(tmp_path),
               ALLOCATOR_REF_SETTINGS=str(hostile), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"{__file__}::test_the_suite_sees_its_pinned_settings"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout
