"""The policy registry: a new design is its own file plus one ``register`` line, and the command
line (``replay --policy``), ``compare``'s what-if list and ``make_allocator`` all find it."""
from __future__ import annotations

import sys

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import compare_rows, main, what_if_designs
from allocator_ref.caching import CachingAllocator
from allocator_ref.caching.npu import NPUCachingAllocator
from allocator_ref.device import SimDevice
from allocator_ref.policies import BFCAllocator, DirectAllocator, StreamOrderedAllocator
from allocator_ref.policies.registry import get_policy, make_allocator, policy_names, register, unregister
from allocator_ref.trace import save_snapshot

# The whole of a throwaway design: one file (Direct's behaviour under another name) ...
TOY_FILE = '''"""A throwaway allocator design, for the registry test."""
from allocator_ref.policies.direct import DirectAllocator


class ToyAllocator(DirectAllocator):
    """cudaMalloc per request, under another name."""
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_policy.py").write_text(TOY_FILE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    # ... plus one line.
    register("toy", "toy_policy:ToyAllocator", "a throwaway design")
    yield "toy"
    unregister("toy")
    sys.modules.pop("toy_policy", None)


@pytest.fixture
def snapshot(tmp_path):
    a = CachingAllocator(SimDevice("tiny-1gb"))
    a.record_memory_history(enabled="all")
    x, y = a.malloc(3 * 2**20), a.malloc(5000)
    a.free(x)
    z = a.malloc(2**20)
    a.free(y)
    a.free(z)
    return save_snapshot(a.snapshot(), tmp_path / "small.pickle")


def test_the_built_in_designs_are_registered_in_the_cli_order():
    assert policy_names() == ("caching", "stream_ordered", "bfc", "direct", "npu")
    assert ar.policy_names() == policy_names()
    dev = SimDevice("tiny-1gb")
    for name, cls in [("caching", CachingAllocator), ("stream_ordered", StreamOrderedAllocator),
                      ("bfc", BFCAllocator), ("direct", DirectAllocator), ("npu", NPUCachingAllocator)]:
        assert type(make_allocator(dev, name, "")) is cls
    dev.close()


def test_a_new_design_appears_in_the_cli_and_the_what_if_list(toy, snapshot, capsys):
    assert "toy" in policy_names()
    assert ("toy", "") in what_if_designs()
    dev = SimDevice("tiny-1gb")
    assert type(make_allocator(dev, "toy")).__name__ == "ToyAllocator"
    dev.close()
    # the command line offers it and runs it ...
    assert main(["replay", str(snapshot), "--policy", "toy"]) == 0
    assert "policy toy" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["replay", str(snapshot), "--policy", "no_such_design"])
    assert "'toy'" in capsys.readouterr().err               # argparse lists the choices
    # ... and compare's what-if table has a row for it, measured
    rows = {r["policy"]: r for r in compare_rows(str(snapshot), profile="tiny-1gb")}
    assert rows["toy"]["peak_reserved"] > 0 and rows["toy"]["prediction"] is True


def test_taken_back_it_is_gone(toy):
    unregister(toy)
    assert "toy" not in policy_names() and ("toy", "") not in what_if_designs()


def test_bad_names_are_one_clear_line():
    with pytest.raises(ValueError, match="unknown policy 'magic': choose one of caching, stream_ordered"):
        get_policy("magic")
    with pytest.raises(ValueError, match="already registered"):
        register("bfc", "allocator_ref.policies.bfc:BFCAllocator")
    with pytest.raises(ValueError, match="one word"):
        register("two words", "x:Y")
    with pytest.raises(ValueError, match="unknown policy"):
        make_allocator(SimDevice("tiny-1gb"), "magic")


def test_no_policy_is_the_one_the_environment_selects():
    # PYTORCH_CUDA_ALLOC_CONF is read once per process (get_allocator_backend); the course's
    # test environment selects the native backend.
    a = make_allocator(SimDevice("tiny-1gb"))
    assert type(a) is CachingAllocator
