"""`doctor FOLDER` compares the ranks' snapshots in it and leaves the job's other files (logs, scripts)
out; a folder with no .pickle/.pkl file still offers every file, so an unusual name is not lost."""
from allocator_ref.memory_doctor.ranks import snapshot_paths


def test_a_folder_stands_for_its_snapshot_files(tmp_path):
    for name in ("rank0.pickle", "rank1.PKL", "train.log", "run.py", ".hidden.pickle"):
        (tmp_path / name).write_bytes(b"x")
    skipped = []
    assert [p.name for p in snapshot_paths([tmp_path], skipped)] == ["rank0.pickle", "rank1.PKL"]
    assert sorted(p.name for p in skipped) == ["run.py", "train.log"]       # said in the report, not read


def test_a_folder_without_snapshot_suffixes_offers_every_file_and_named_files_are_kept(tmp_path):
    (tmp_path / "rank0.dump").write_bytes(b"x")
    (tmp_path / "rank1.dump").write_bytes(b"x")
    named = tmp_path / "notes.txt"
    named.write_bytes(b"x")
    assert [p.name for p in snapshot_paths([tmp_path])] == ["notes.txt", "rank0.dump", "rank1.dump"]
    assert snapshot_paths([named]) == [named]
