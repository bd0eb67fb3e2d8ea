"""Shared fixtures for the device tests.

``device`` is parametrised over the devices this machine has: the simulated
one always, the real GPU (marked ``gpu``) when a driver and a GPU answer --
otherwise that case is skipped with the reason printed by ``pytest -ra``.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from allocator_ref import settings

# The suite pins its own course settings: a workshop that exports ALLOCATOR_REF_PROFILE=t4-16gb or
# drops a course-settings.toml at the course root must not change what `make test` checks.  Done
# at import, before any test or notebook kernel (which inherits os.environ) reads a setting.
PINNED_SETTINGS = Path(__file__).resolve().parent / "course-settings.toml"
for _env_name, _default in settings.SETTINGS.values():
    os.environ.pop(_env_name, None)
os.environ[settings.FILE_ENV] = str(PINNED_SETTINGS)

from allocator_ref.device import SimDevice
from allocator_ref.device.cuda import probe_cuda

DEVICE_KINDS = ["sim", pytest.param("cuda", marks=pytest.mark.gpu)]


@functools.lru_cache(maxsize=None)
def gpu_probe() -> tuple[bool, str]:
    """(found, reason) -- asked once per test session."""
    return probe_cuda()


def require_gpu() -> None:
    found, reason = gpu_probe()
    if not found:
        pytest.skip(f"no GPU: {reason}")


def open_kind(kind: str, profile: str = "tiny-1gb"):
    if kind == "sim":
        return SimDevice(profile)
    require_gpu()
    from allocator_ref.device.cuda import CudaDevice
    return CudaDevice(0)


@pytest.fixture(params=DEVICE_KINDS)
def device(request):
    """One device per available kind (simulated 'tiny-1gb', real GPU when present)."""
    dev = open_kind(request.param)
    yield dev
    dev.close()


@pytest.fixture
def devices():
    """Every available device kind, opened (simulated always, CUDA when present)."""
    opened = [SimDevice("tiny-1gb")]
    if gpu_probe()[0]:
        from allocator_ref.device.cuda import CudaDevice
        opened.append(CudaDevice(0))
    yield opened
    for dev in opened:
        dev.close()


@pytest.fixture
def sim():
    """The small teaching device, for tests that need exact simulated numbers."""
    dev = SimDevice("tiny-1gb")
    yield dev
    dev.close()


LANGUAGE_VARIABLES = ("ALLOCATOR_REF_LANG", "LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE", "JPY_SESSION_NAME",
                      settings.FILE_ENV)


@pytest.fixture
def plain_language(monkeypatch, tmp_path):
    """English unless the test asks: no language variable, no settings file (the suite's pinned one
    says en), a working folder with no edition marker, no language chosen, nothing remembered."""
    from allocator_ref.editions import language as lang
    for name in LANGUAGE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    lang.set_language(None)
    lang.forget()
    yield
    lang.set_language(None)
    lang.forget()


# ------------------------------------------------------------------ two workers (make test: pytest -n)
# make test runs the suite on pytest-xdist's workers.  Each module stays on one worker (its module
# fixtures, e.g. the 7,400-stream commands, run once), and the modules that execute notebooks share one:
# test_notebooks.execute_notebook runs each chapter once per session and shares it (test_chapter_claims,
# the Chinese edition's tests, the pictures and the site read the same runs), so split across workers they would
# each run it again.  (xdist's own "loadgroup" marks do not take under pytest 9: the scheduler is ours.)
NOTEBOOK_MODULES = {"test_notebooks", "test_chapter_claims", "test_edition_zh", "test_edition_zh_outputs", "test_site",
                    "test_edition_setup_zh", "test_labs_chinese", "test_pictures", "test_viz_language"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's module-at-a-time scheduling, with the notebook modules as one scope."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    # xdist sorts the modules by their number of tests unless told not to (--loadscope-reorder, on by
    # default): the order to keep is the collection's, slowest first (pytest_collection_modifyitems).
    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


# Longest first: a worker asks for the next module when it is nearly idle, in collection order, so
# a long module collected late (test_site, test_labs_guide) ran while the other worker had already
# finished.  Sent longest first, the short modules fill the end and both workers finish together.
# The slowest modules of a two-worker run of the suite on the 2-core machine, slowest first; a
# module not named keeps its place after them (a stale list costs minutes, never a test).
SLOWEST_FIRST = ("test_labs_grading", "notebooks", "test_workshop_hub", "test_labs_gradebook", "test_doctor_real",
                 "test_predict", "test_labs", "test_labs_forged_grades", "test_address_space_full",
                 "test_labs_escapes", "test_caching_midrun_fuzz", "test_labs_guide", "test_labs_platform",
                 "test_labs_attacks", "test_snapshot_records", "test_predict_scripts", "test_workshop_image")


def _scope(nodeid: str) -> str:
    stem = Path(nodeid.split("::", 1)[0]).stem
    return "notebooks" if stem in NOTEBOOK_MODULES else stem


def pytest_collection_modifyitems(config, items):
    """On an xdist worker (every worker sorts alike, so their collections stay identical), the
    slowest modules first, each module's tests in their own order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {scope: i for i, scope in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(_scope(item.nodeid), len(rank)))
