"""`doctor FOLDER` compares the ranks' snapshots in it and leaves the job's other files (logs, scripts,
checkpoints) out, unopened; a snapshot with another name is compared when it is named; a file is
stat-ed before it is read; files of different jobs are told apart; every device of a file is a rank."""
import os
import pickle

import allocator_ref as ar
from allocator_ref.memory_doctor import examples
from allocator_ref.memory_doctor.ranks import doctor_ranks, snapshot_paths

MiB = 2**20


def test_a_folder_stands_for_its_snapshot_files(tmp_path):
    for name in ("rank0.pickle", "rank1.PKL", "train.log", "run.py", ".hidden.pickle"):
        (tmp_path / name).write_bytes(b"x")
    skipped = []
    assert [p.name for p in snapshot_paths([tmp_path], skipped)] == ["rank0.pickle", "rank1.PKL"]
    assert sorted(p.name for p in skipped) == ["run.py", "train.log"]       # said in the report, not read


def test_a_folder_without_snapshot_suffixes_opens_nothing_and_named_files_are_kept(tmp_path):
    # Issue 57 item 8: a folder's scripts, logs and checkpoints are never read; it used to offer every
    # file when none had a snapshot suffix (so a checkpoint was unpickled as a candidate).
    (tmp_path / "rank0.dump").write_bytes(b"x")
    (tmp_path / "model.pt").write_bytes(b"x")
    named = tmp_path / "notes.txt"
    named.write_bytes(b"x")
    skipped = []
    assert snapshot_paths([tmp_path], skipped) == []
    assert sorted(p.name for p in skipped) == ["model.pt", "notes.txt", "rank0.dump"]
    assert snapshot_paths([named]) == [named]


def _write(folder, name, snap):
    (folder / name).write_bytes(pickle.dumps(snap))


def test_a_file_over_the_size_cap_or_not_a_regular_file_is_left_out_unread(tmp_path, monkeypatch):
    for i, snap in enumerate(examples.job_ranks(3, outlier=-1)):
        _write(tmp_path, f"rank{i}.pickle", snap)
    os.mkfifo(tmp_path / "rank8.pickle")           # opened, it would block: it must be stat-ed first
    (tmp_path / "rank9.pickle").write_bytes(b"\x80" * (2 * MiB))
    monkeypatch.setenv("ALLOCATOR_REF_MAX_SNAPSHOT_MB", "1")
    report = doctor_ranks([tmp_path])
    assert [r.name for r in report.ranks] == ["rank0.pickle", "rank1.pickle", "rank2.pickle"]
    assert sum("rank8.pickle" in p for p in report.problems) == 1
    assert sum("rank9.pickle" in p for p in report.problems) == 1


def test_two_jobs_in_one_folder_are_told_apart_and_only_ranks_of_one_job_are_compared(tmp_path):
    for i, snap in enumerate(examples.job_ranks(3, outlier=-1)):
        _write(tmp_path, f"rank{i}.pickle", snap)
    _write(tmp_path, "long_context.pickle", examples.long_context_rank())
    report = doctor_ranks([tmp_path])
    assert [r.name for r in report.ranks] == ["rank0.pickle", "rank1.pickle", "rank2.pickle"]
    assert [r.name for r in report.apart] == ["long_context.pickle"]
    # the long-context file reserves the most, but it is not called the job's outlier
    assert report.apart[0].peak_reserved > max(r.peak_reserved for r in report.ranks)
    assert report.outlier is None or report.outlier.name != "long_context.pickle"
    assert any("long_context.pickle is not a rank of the same job" in p for p in report.problems)
    text, j = report.text(), report.to_json()
    assert "3 ranks of one job" in text and "NOT RANKS OF THIS JOB" in text
    assert j["not_ranks_of_this_job"][0]["name"] == "long_context.pickle"
    assert j["not_ranks_of_this_job"][0]["size_overlap"] < 0.5


def test_every_device_of_a_multi_gpu_rank_file_is_compared(tmp_path):
    ranks = examples.job_ranks(3, outlier=2)       # rank 2 holds twice the activations
    two = {"segments": [dict(s, device=i) for i, sn in enumerate(ranks[:2]) for s in sn["segments"]],
           "device_traces": [ranks[0]["device_traces"][0], ranks[1]["device_traces"][0]],
           "allocator_settings": ranks[0].get("allocator_settings", {})}
    ar.save_snapshot(two, tmp_path / "node0.pickle")
    _write(tmp_path, "node1.pickle", ranks[2])
    report = doctor_ranks([tmp_path])
    assert [r.name for r in report.ranks] == ["node0.pickle (device 0)", "node0.pickle (device 1)", "node1.pickle"]
    assert report.outlier.name == "node1.pickle" and report.why == "more live memory"


def test_no_setting_is_concluded_from_what_ifs_that_did_not_run(tmp_path):
    from allocator_ref.memory_doctor.ranks import RanksReport, Rank, _one_setting
    from allocator_ref.memory_doctor.report import Verdict

    class Stub:                                    # a report whose what-if replay could not run
        verdict = Verdict("whatif-unverified", "", None, None)
    ranks = [Rank(f"r{i}", Stub(), MiB, 2 * MiB, MiB, 0, 0, "") for i in range(2)]
    out = RanksReport(ranks)
    _one_setting(out)
    assert out.setting is None and out.setting_words.startswith("none can be said")
    assert "none needed" not in out.setting_words
