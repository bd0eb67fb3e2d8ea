"""torch_npu snapshots are recognised from what torch_npu writes and replayed on the NPU design with
no option; CUDA snapshots never are (every real trace in ../shared/traces and every course-made run).

No public snapshot recorded with torch_npu was found, so the NPU files are course-made
(tests/npu_traces.py): the NPU mirror's runs in the shape torch_npu's _snapshot() writes."""
import pickle

import pytest

from allocator_ref.__main__ import main
from allocator_ref.memory_doctor import examples
from allocator_ref.trace.fetch import search_dirs
from allocator_ref.trace.npu_detect import detect, rounding_vote, set_aside_workspace
from allocator_ref.trace.recording import load_recording
from allocator_ref.trace.replay import replay

from npu_traces import ACL_STREAM, RUNS, record, torch_npu_shape


@pytest.fixture(scope="module")
def runs():
    return {name: record(workload, config) for name, (workload, config) in RUNS.items()}


def as_torch_npu_would_write(snapshot):
    """A CUDA snapshot stripped of everything torch_npu would not write (settings, time_us, stream 0):
    only the rounding of its blocks is left to tell them apart."""
    def stream(s):
        return ACL_STREAM if s == 0 else s
    return {"segments": [{**s, "stream": stream(s["stream"])} for s in snapshot["segments"]],
            "device_traces": [[{k: (stream(v) if k == "stream" else v) for k, v in e.items() if k != "time_us"}
                               for e in t] for t in snapshot["device_traces"]]}


@pytest.mark.parametrize("workspace", [False, True])
@pytest.mark.parametrize("name", list(RUNS))
def test_a_torch_npu_snapshot_replays_address_exact_with_no_option(runs, name, workspace):
    snapshot = torch_npu_shape(runs[name], workspace=workspace)
    assert detect(load_recording(snapshot).snapshot).policy == "npu"
    result = replay(snapshot, verify=True)
    assert result.policy == "npu" and result.perfect, result.first_divergence
    assert result.to_json()["allocs_exact"] == result.to_json()["allocs"] > 0


@pytest.mark.parametrize("name", list(RUNS))
def test_replayed_as_a_cuda_run_it_diverges(runs, name):
    result = replay(torch_npu_shape(runs[name]), verify=True, policy="caching")
    assert result.policy == "caching" and not result.perfect


def test_the_workspace_buffer_is_set_aside_not_replayed(runs):
    snapshot = torch_npu_shape(runs["padded-requests"], workspace=True)
    loaded = load_recording(snapshot).snapshot
    assert [w["size"] for w in loaded["npu_workspace"]] == [4 << 20]
    assert all(e["action"] != "workspace_snapshot" for e in loaded["device_traces"][0])
    assert len(loaded["device_traces"][0]) == len(snapshot["device_traces"][0]) - 3   # its three entries
    first, recorded_first = loaded["device_traces"][0][0], snapshot["device_traces"][0][3]
    assert (first["action"], first["addr"]) == (recorded_first["action"], recorded_first["addr"])
    workspace_addr = loaded["npu_workspace"][0]["addr"]
    assert all(e.get("addr") != workspace_addr for e in loaded["device_traces"][0])
    assert len(loaded["segments"]) == len(snapshot["segments"]) - 1
    assert "npu_workspace" not in snapshot           # the caller's dict is left as it was


def test_the_command_line_names_the_allocator_and_policy_forces_either(runs, tmp_path, capsys):
    path = tmp_path / "npu.pickle"
    path.write_bytes(pickle.dumps(torch_npu_shape(runs["near-16k-alignment"], workspace=True)))
    assert main(["replay", str(path), "--verify"]) == 0
    assert "policy npu" in capsys.readouterr().out
    assert main(["replay", str(path), "--verify", "--policy", "caching"]) == 1
    assert "policy caching" in capsys.readouterr().out


def test_a_cuda_run_replayed_on_the_npu_design_is_not_exact(tmp_path):
    cuda = examples.fragmentation_run()
    assert replay(cuda, verify=True).policy == "caching"
    assert not replay(cuda, verify=True, policy="npu").perfect


@pytest.mark.parametrize("requested, size, vote", [
    (512, 1024, 1), (512, 512, -1), (100, 512, 0), (481, 1024, 1), (481, 512, -1), (700, 1024, 0),
])
def test_one_block_votes_only_when_one_rounding_explains_it(requested, size, vote):
    assert rounding_vote(requested, size) == vote


# ---- no false positive -----------------------------------------------------------------------
def course_cuda_runs():
    return {"fragmentation": examples.fragmentation_run(), "shortage": examples.shortage_run(),
            "big-expandable": examples.big_expandable_run(held_gib=2, total_gib=4),
            **{f"rank{i}": s for i, s in enumerate(examples.job_ranks(why="laid out worse"))}}


def test_no_course_made_cuda_run_is_taken_for_torch_npu():
    for name, snapshot in course_cuda_runs().items():
        assert detect(load_recording(snapshot).snapshot).policy == "caching", name
        stripped = detect(load_recording(as_torch_npu_would_write(snapshot)).snapshot)
        assert stripped.policy == "caching", (name, stripped)


def real_traces():
    seen = {}
    for folder, _why in search_dirs():
        for path in sorted(folder.glob("*.pickle")) if folder.is_dir() else []:
            seen.setdefault(path.name, path)
    return list(seen.values())


@pytest.mark.slow
def test_no_real_cuda_trace_is_taken_for_torch_npu():
    paths = real_traces()
    if not paths:
        pytest.skip("no real traces here (python -m allocator_ref traces fetch, or ../shared/traces)")
    for path in paths:
        snapshot = load_recording(path).snapshot
        assert detect(snapshot).policy == "caching", path.name
        # even with every format difference taken away, the block sizes say CUDA
        stripped = detect(load_recording(as_torch_npu_would_write(snapshot)).snapshot)
        assert stripped.policy == "caching" and stripped.evidence.startswith("rounding votes: 0 NPU"), \
            (path.name, stripped)


@pytest.mark.parametrize("hostile", [None, [], "x", {"device_traces": "x"}, {"device_traces": [None, 3]},
                                     {"device_traces": [[{"action": "workspace_snapshot"}]], "segments": 7}])
def test_set_aside_workspace_never_raises_on_hostile_input(hostile):
    out = set_aside_workspace(hostile)
    assert out is hostile or out["npu_workspace"] == [{"device": 0, "addr": None, "size": None, "stream": None}]


def test_a_setting_torch_npu_could_not_have_had_is_refused_naming_the_file(runs, tmp_path, capsys):
    snapshot = runs["padded-requests"] | {"allocator_settings": {"PYTORCH_NPU_ALLOC_CONF": "bogus:1"}}
    path = tmp_path / "bad.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    for command in (["replay", str(path), "--verify"], ["doctor", str(path)]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {path}: allocator_settings['PYTORCH_NPU_ALLOC_CONF'] = 'bogus:1'")
        assert "unrecognized option 'bogus'" in err and "\n" not in err
