"""`doctor FOLDER` spreads the rank files over worker processes (memory_doctor/workers.py): the
report is the same with one worker or two, rows and refusals in the files' order, a bad file still
one line; the pool never has more workers than cores or than the ``workers`` setting allows.
No timing here: benchmarks/bench_doctor_workers.py measures the speed-up."""
import os
import pickle

import pytest

from allocator_ref.memory_doctor import examples, workers
from allocator_ref.memory_doctor.ranks import doctor_ranks


def _job_folder(folder):
    for i, snap in enumerate(examples.job_ranks(4, outlier=2)):
        (folder / f"rank{i}.pickle").write_bytes(pickle.dumps(snap))
    (folder / "rank4.pickle").write_bytes(b"not a pickle")                          # unreadable: one line
    (folder / "rank5.pickle").write_bytes((folder / "rank1.pickle").read_bytes())   # a second copy: one line
    return folder


def _report(folder, monkeypatch, n: int, lang: str = "en"):
    monkeypatch.setenv("ALLOCATOR_REF_WORKERS", str(n))
    monkeypatch.setattr(workers, "cores", lambda: 2)       # two even on a one-core runner
    report = doctor_ranks([folder])
    with_pool = workers.worker_count(4)
    j = report.to_json()
    j.pop("seconds")
    return report.text(), j, with_pool


def test_one_worker_and_two_give_the_same_report(tmp_path, monkeypatch):
    folder = _job_folder(tmp_path)
    text1, json1, pool1 = _report(folder, monkeypatch, 1)
    text2, json2, pool2 = _report(folder, monkeypatch, 2)
    assert (pool1, pool2) == (1, 2)
    assert json1 == json2 and text1 == text2
    assert [r["name"] for r in json2["ranks"]] == [f"rank{i}.pickle" for i in range(4)]
    assert json2["outlier"] == "rank2.pickle"
    assert [p.split(":")[0] for p in json2["problems"]] == [f"left out {tmp_path / 'rank4.pickle'}",
                                                            f"left out {tmp_path / 'rank5.pickle'}"]


def test_a_worker_speaks_the_callers_language(tmp_path, monkeypatch):
    """--lang zh is chosen in this process, not in the environment a spawned worker starts from."""
    from allocator_ref.editions.language import speaking
    folder = _job_folder(tmp_path)
    with speaking("zh"):
        text1, _, _ = _report(folder, monkeypatch, 1)
        text2, _, _ = _report(folder, monkeypatch, 2)
    english, _, _ = _report(folder, monkeypatch, 2)
    assert text1 == text2 != english
    problem = next(line for line in text2.splitlines() if "rank4.pickle" in line)
    assert any("\u4e00" <= ch <= "\u9fff" for ch in problem), problem


def _pid(_):
    return os.getpid()


def test_the_work_runs_in_as_many_processes_as_workers():
    items = [(i,) for i in range(4)]
    assert set(workers.map_in_order(_pid, items, 1)) == {os.getpid()}        # one worker: no pool
    pids = workers.map_in_order(_pid, items, 2)
    assert os.getpid() not in pids and 1 <= len(set(pids)) <= 2


@pytest.mark.parametrize("setting, cores, jobs, expected", [
    ("auto", 2, 8, 2), ("auto", 16, 3, 3), ("1", 2, 8, 1), ("64", 2, 8, 2), ("auto", 2, 0, 1)])
def test_never_more_workers_than_cores_the_setting_or_the_files(setting, cores, jobs, expected, monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_WORKERS", setting)
    monkeypatch.setattr(workers, "cores", lambda: cores)
    assert workers.worker_count(jobs) == expected


def test_cores_are_the_ones_this_process_may_use():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    assert workers.cores() == len(os.sched_getaffinity(0))


def test_the_command_line_prints_the_same_report_with_two_workers(tmp_path):
    """`python -m allocator_ref doctor FOLDER`: the workers are spawned under the -m entry point."""
    import subprocess
    import sys
    from pathlib import Path
    folder = _job_folder(tmp_path)
    root = Path(__file__).resolve().parents[1]
    out = {}
    for n in (1, 2):
        env = dict(os.environ, ALLOCATOR_REF_WORKERS=str(n), MPLBACKEND="Agg", PYTHONPATH=str(root))
        proc = subprocess.run([sys.executable, "-m", "allocator_ref", "doctor", str(folder)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        out[n] = proc.stdout
    assert out[1] == out[2] and "4 ranks of one job" in out[2] and "rank4.pickle" in out[2]
