"""replay --verify on a run recorded on a GPU larger than every profile (a B200's 150 GiB expandable
run): the simulated GPU is sized from the trace, the replay is exact, and the result says so. Before,
the verify replay ran on the default 80 GB profile and matched nothing."""
import json
import subprocess
import sys

import pytest

from allocator_ref.memory_doctor.examples import big_expandable_run
from allocator_ref.trace.replay import replay
from allocator_ref.trace.snapshot import save_snapshot


@pytest.fixture(scope="module")
def big_run():
    return big_expandable_run(held_gib=120, total_gib=160)


def test_verify_sizes_the_gpu_from_the_trace(big_run):
    result = replay(big_run, verify=True, progress=False)
    assert result.perfect, result
    notes = " ".join(d for dev in result.devices for d in dev.inferred)
    assert "sized to" in notes and "GiB" in notes, notes


def test_the_cli_says_it_and_exits_0(big_run, tmp_path):
    path = save_snapshot(big_run, tmp_path / "b200.pickle")
    out = subprocess.run([sys.executable, "-m", "allocator_ref", "replay", str(path), "--verify", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert any("sized to" in note for note in report["inferred"]), report["inferred"]


def test_a_gpu_size_with_verify_is_refused_truthfully(big_run):
    with pytest.raises(ValueError, match="follows the trace"):
        replay(big_run, verify=True, device_memory=100 * 2**30, progress=False)
