"""`make test` on two workers: the modules go out slowest first, the notebook modules as one.

tests/conftest.py gives pytest-xdist its scheduler (a module at a time; the modules that execute
notebooks share one worker and its runs) and, on a worker, sorts the collection so the slowest
modules are sent first.  A name in those lists that no longer is a module would silently stop
doing its work, so each must name a module that exists.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import conftest

TESTS = Path(__file__).resolve().parent
MODULES = {p.stem for p in TESTS.glob("test_*.py")}


def test_every_module_named_for_the_workers_exists():
    assert conftest.NOTEBOOK_MODULES <= MODULES, conftest.NOTEBOOK_MODULES - MODULES
    named = set(conftest.SLOWEST_FIRST) - {"notebooks"}
    assert named <= MODULES, named - MODULES
    assert len(conftest.SLOWEST_FIRST) == len(set(conftest.SLOWEST_FIRST))


def _items(*nodeids):
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_a_worker_gets_the_slowest_modules_first_and_each_module_in_its_own_order():
    notebook_a, notebook_b = sorted(conftest.NOTEBOOK_MODULES)[:2]
    slowest = next(s for s in conftest.SLOWEST_FIRST if s != "notebooks")
    assert conftest.SLOWEST_FIRST.index(slowest) < conftest.SLOWEST_FIRST.index("notebooks")   # as listed now
    items = _items("tests/test_zz_quick.py::test_one", f"tests/{notebook_a}.py::test_x",
                   f"tests/{slowest}.py::test_b", f"tests/{slowest}.py::test_a",
                   f"tests/{notebook_b}.py::test_y", "tests/test_zz_quick.py::test_two")
    worker = SimpleNamespace(workerinput={"workerid": "gw0"})
    conftest.pytest_collection_modifyitems(worker, items)
    order = [i.nodeid for i in items]
    assert order[:2] == [f"tests/{slowest}.py::test_b", f"tests/{slowest}.py::test_a"]
    assert order[2:4] == [f"tests/{notebook_a}.py::test_x", f"tests/{notebook_b}.py::test_y"]
    assert order[4:] == ["tests/test_zz_quick.py::test_one", "tests/test_zz_quick.py::test_two"]


def test_one_process_keeps_the_collection_order():
    items = _items("tests/test_zz_quick.py::test_one", f"tests/{conftest.SLOWEST_FIRST[0]}.py::test_b")
    conftest.pytest_collection_modifyitems(SimpleNamespace(), items)
    assert [i.nodeid for i in items][0] == "tests/test_zz_quick.py::test_one"


def test_the_notebook_modules_are_one_scope_and_the_others_their_own():
    assert {conftest._scope(f"tests/{m}.py::t") for m in conftest.NOTEBOOK_MODULES} == {"notebooks"}
    assert conftest._scope("tests/test_labs.py::test_x[01]") == "test_labs"


class _Worker:
    """What xdist's scheduler talks to: it is sent the indexes of the tests to run."""
    shutting_down = False

    def __init__(self):
        self.sent = []

    def send_runtest_some(self, indexes):
        self.sent += indexes

    def shutdown(self):
        self.shutting_down = True


def test_xdist_sends_the_modules_in_the_collection_order_slowest_first():
    """Through xdist's own scheduler: the first module a worker is sent is the slowest one listed,
    not the one with the most tests (xdist's default reorders by that; the hook turns it off)."""
    slowest = next(s for s in conftest.SLOWEST_FIRST if s != "notebooks")
    collection = _items(*[f"tests/test_zz_many.py::test_{i}" for i in range(9)], f"tests/{slowest}.py::test_a")
    conftest.pytest_collection_modifyitems(SimpleNamespace(workerinput={"workerid": "gw0"}), collection)
    nodeids = [i.nodeid for i in collection]
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True),
                             getvalue=lambda name: ["popen"] if name == "tx" else None)
    scheduler = conftest.pytest_xdist_make_scheduler(config, None)
    worker = _Worker()
    scheduler.add_node(worker)
    scheduler.add_node_collection(worker, nodeids)
    scheduler.schedule()
    assert nodeids[worker.sent[0]] == f"tests/{slowest}.py::test_a", [nodeids[i] for i in worker.sent]
