"""Predict on training scripts as people write them (course-made scripts in tests/predict_scripts/).

Each script is one thing a real run does that a plain meta recording got wrong or kept quiet
about: an optimizer built before ``model.to("cuda")``, mixed precision (``torch.autocast`` bf16 and
fp16, ``GradScaler``), ``torch.compile``, memory-history windows with ``empty_cache()`` between
them, and ``torch.cuda`` questions no recording can answer.  Needs the optional CPU torch wheel.
"""
from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="predict needs the optional torch CPU wheel (pip install torch)")

from allocator_ref.predict import record_program                    # noqa: E402
from allocator_ref.predict.forecast import TooSlow, forecast, replay_program   # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "predict_scripts"
MiB = 2**20


def step_of(name: str):
    return runpy.run_path(str(SCRIPTS / name), run_name="__predict_test__")["step"]


def alloc_sizes(program: dict) -> list:
    return [e["size"] for e in program["device_traces"][0] if e["action"] == "alloc"]


def cli(*args, cwd=ROOT, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOCATOR_REF_")}
    env.update(PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "allocator_ref", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


# ---- 1. parameter identity across .to(): the optimizer built first steps, its state is recorded
def test_an_optimizer_built_before_to_cuda_records_its_adam_state():
    step = step_of("optimizer_before_to.py")
    first = record_program(step, optimizer_first=True)
    after = record_program(step, optimizer_first=False)
    # PyTorch keeps the Parameter objects across .to() (Module._apply, param.data = ...): both
    # orders are the same program on a GPU, so they must record the same requests.
    assert alloc_sizes(first) == alloc_sizes(after)
    # 2 weights of 4 MiB (the copies .to() makes), their 2 gradients (mm), AdamW's exp_avg and
    # exp_avg_sq for each (zeros_like) and the foreach step's sqrt(exp_avg_sq) for each
    ops = [e["frames"][0]["name"] for e in first["device_traces"][0] if e["action"] == "alloc" and e["size"] == 4 * MiB]
    assert ops == ["aten::_to_copy"] * 2 + ["aten::mm"] * 2 + ["aten::zeros_like"] * 4 + ["aten::_foreach_sqrt"] * 2
    assert first["predict_caveats"] == []


def test_an_optimizer_stepping_a_tensor_predict_never_saw_is_never_called_a_fit():
    program = record_program(step_of("optimizer_on_cpu_tensor.py"))
    [caveat] = [c for c in program["predict_caveats"] if c["kind"] == "optimizer-unseen"]
    assert caveat["blocking"] and caveat["nbytes"] == 2 * (512 * 1024 * 4)    # Adam: exp_avg + exp_avg_sq
    assert caveat["where"].startswith("optimizer_on_cpu_tensor.py:")
    prediction = forecast(program, "h100-80gb")
    assert prediction.peak_reserved < prediction.usable          # the replay alone would fit ...
    assert prediction.verdict == "cannot say" and not prediction.fits   # ... but predict does not promise it
    assert prediction.to_json()["fits"] is None


@pytest.mark.slow
def test_the_command_exits_3_and_says_cannot_say_in_its_json(tmp_path):
    proc = cli("predict", SCRIPTS / "optimizer_on_cpu_tensor.py", "--no-what-if", "--json")
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdict"] == "cannot say" and report["fits"] is None
    assert [c["kind"] for c in report["caveats"] if c["blocking"]] == ["optimizer-unseen"]


# ---- 2. autocast: the per-op cast policy and the weight-cast cache
def test_a_bf16_autocast_step_makes_the_casts_pytorchs_autocast_makes():
    program = record_program(step_of("autocast_step.py"), dtype="bfloat16")
    # x, weight 1, bias 1, weight 2, bias 2 to bfloat16 (linear: lower_precision_fp), and the
    # bf16 log-probabilities to float32 for nll_loss (fp32 policy; cross_entropy's log_softmax keeps
    # the dtype it is given, LossNLL.cpp)
    assert program["predict_autocast_casts"] == 6
    sizes = alloc_sizes(program)
    for nbytes in (32 * 64 * 2, 128 * 64 * 2, 128 * 2, 10 * 128 * 2, 10 * 2, 32 * 10 * 2, 32 * 10 * 4):
        assert nbytes in sizes, nbytes


def test_the_weight_cast_cache_lives_for_one_autocast_region():
    step = step_of("autocast_step.py")
    twice_in_one = record_program(step, forwards=2)["predict_autocast_casts"]
    once_in_two = record_program(step, regions=2)["predict_autocast_casts"]
    # in one region the 4 weight casts are cached: the second forward casts only x and the log-probs
    assert twice_in_one == 6 + 2
    # a new region starts with an empty cache (clear_autocast_cache at the outermost exit)
    assert once_in_two == 6 + 6


def test_fp16_softmax_reads_halves_and_writes_floats_without_a_copy():
    n = 4 * 256 * 256
    half = alloc_sizes(record_program(step_of("softmax_step.py"), dtype="float16"))
    bf16 = alloc_sizes(record_program(step_of("softmax_step.py"), dtype="bfloat16"))
    assert half == [n * 2, n * 4]                 # the scores, then float32 probabilities (SoftMax.cpp half_to_float)
    assert bf16 == [n * 2, n * 4, n * 4]          # bfloat16 has no such kernel: a float32 copy first


def test_a_grad_scaler_fp16_step_records_and_steps_the_optimizer():
    program = record_program(step_of("autocast_step.py"), dtype="float16", scaler=True)
    sizes = alloc_sizes(program)
    assert sizes.count(128 * 64 * 4) >= 4         # weight 1's grad, exp_avg, exp_avg_sq (+ the weight)
    kinds = {c["kind"]: c for c in program["predict_caveats"]}
    assert not kinds["host-read"]["blocking"]     # found_inf.item(): 0 stands in, said as a note
    assert forecast(program, "h100-80gb").verdict == "fits"


# ---- 3. torch.compile
def test_torch_compile_is_recorded_as_eager_and_said():
    step = step_of("compiled_step.py")
    plain = record_program(step)
    [note] = plain["predict_caveats"]
    assert note["kind"] == "compile" and not note["blocking"]
    graphs = record_program(step, mode="reduce-overhead")
    assert graphs["predict_caveats"][0]["blocking"]          # CUDA graph pools: nothing eager shows them
    assert forecast(graphs, "h100-80gb").verdict == "cannot say"


# ---- 4. memory-history windows and empty_cache
def test_each_memory_history_window_is_reported_and_empty_cache_is_replayed():
    step = step_of("two_windows.py")
    emptied = replay_program(record_program(step, empty=True), "h100-80gb")
    kept = replay_program(record_program(step, empty=False), "h100-80gb")
    assert [w["peak_reserved"] for w in emptied.windows] == [64 * MiB, 16 * MiB]
    # without empty_cache() the 64 MiB segment stays reserved into the second window
    assert [w["peak_reserved"] for w in kept.windows] == [64 * MiB, 64 * MiB]
    assert [w["peak_allocated"] for w in emptied.windows] == [64 * MiB, 16 * MiB]


# ---- the replay: linear, bounded, and the live blocks at the peak still right
def test_live_blocks_at_the_peak_when_memory_only_grows():
    def growing():
        keep = [torch.empty(n * MiB, dtype=torch.uint8, device="cuda") for n in range(1, 41)]
        return keep
    run = replay_program(record_program(growing, stacks=False), "h100-80gb")
    assert [size for size, _ in run.at_peak] == [n * MiB for n in range(40, 32, -1)]


def test_a_replay_past_its_deadline_stops_with_one_line():
    program = record_program(step_of("optimizer_before_to.py"))
    with pytest.raises(TooSlow, match="--timeout"):
        replay_program(program, "h100-80gb", deadline=time.monotonic() - 1)


def test_the_timeout_bounds_the_replay_after_the_recording(monkeypatch, capsys):
    """--timeout bounds the whole command: a recording that used up the time leaves no replay to run.
    The recording is stood in for by one that takes the whole budget (deterministic: no race with the
    machine's speed), then hands back a real recorded program."""
    from allocator_ref.__main__ import main
    from allocator_ref.predict import sandbox
    program = record_program(step_of("optimizer_before_to.py"))

    def slow_recording(*args, timeout, **kwargs):
        time.sleep(timeout + 0.2)                      # the script's step took all of --timeout
        return {"program": program, "sweep": []}

    monkeypatch.setattr(sandbox, "record_in_subprocess", slow_recording)
    code = main(["predict", str(SCRIPTS / "optimizer_before_to.py"), "--no-what-if", "--timeout", "1"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "--timeout" in err and err.count("\n") == 1, (code, out, err)


def test_many_history_windows_replay_in_linear_time():
    """Each open window's peaks are kept per event, but a script that opened 80,000 windows before
    its allocations pays for them once, not once per event (events x windows was the cost)."""
    from allocator_ref.predict.forecast import _OpenWindows
    windows = [{"start": i, "stop": i + 1, "peak_allocated": 0, "peak_reserved": 0} for i in range(80_000)]
    windows.append({"start": 80_000, "stop": 80_010, "peak_allocated": 0, "peak_reserved": 0})
    tracker, touched = _OpenWindows(windows), []
    for index in range(80_000, 80_020):
        tracker.update(index, 7, 7)                     # allocated and reserved right after the event
        touched.append(len(tracker.open))
    assert touched[:10] == [1] * 10 and touched[10:] == [0] * 10, touched
    assert windows[-1]["peak_allocated"] == 7 and windows[0]["peak_allocated"] == 0


# ---- torch.cuda calls with no answer, and a torch.py beside the script
@pytest.mark.slow
def test_a_question_for_the_allocator_is_refused_by_name(tmp_path):
    proc = cli("predict", SCRIPTS / "asks_the_allocator.py", "--no-what-if")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "torch.cuda.memory_allocated()" in lines[0]
    assert "not compiled with CUDA" not in proc.stderr


@pytest.mark.slow
def test_a_torch_py_beside_the_script_does_not_shadow_torch(tmp_path):
    (tmp_path / "torch.py").write_text("raise SystemExit('the fake torch.py was imported')\n")
    (tmp_path / "train.py").write_text((SCRIPTS / "optimizer_before_to.py").read_text())
    proc = cli("predict", tmp_path / "train.py", "--no-what-if", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "fits"


# ---- the report: the cuBLAS workspaces are cuBLAS's, the unseen list as PyTorch's source has it
def test_the_cublas_workspaces_are_not_put_on_the_users_lines():
    report = forecast(record_program(step_of("optimizer_before_to.py")), "h100-80gb").to_json()
    owners = [(row["size"], row["made_by"]) for row in report["at_peak"]]
    assert owners.count((32 * MiB, "cublas")) == 2          # forward and backward threads, 32 MiB on an H100
    assert all(owner == "program" for size, owner in owners if size != 32 * MiB)


def test_cublaslt_has_its_own_workspace_in_2_11_unless_told_to_share(monkeypatch):
    """PyTorch 2.11 (the release the course models): cuBLASLt's 1 MiB workspace comes from a map of its own
    unless TORCH_CUBLASLT_UNIFIED_WORKSPACE=1 opts in to sharing cuBLAS's; sharing became the default in 2.12
    (pytorch/pytorch#175879), see predict/unseen.py."""
    from allocator_ref.predict.unseen import CUBLASLT_WORKSPACE, unseen_items
    lt = lambda: next(u for u in unseen_items("h100-80gb", 0, 2, 32 * MiB) if u.name == "cuBLASLt workspace")
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "en")
    monkeypatch.delenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", raising=False)
    assert lt().nbytes == CUBLASLT_WORKSPACE
    monkeypatch.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "1")
    assert lt().nbytes == 0


# ---- chapter 7 replays these recordings where torch is absent: they must be what its code records now
def test_chapter7s_stored_recordings_are_what_its_steps_record_today():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import record_chapter7
    finally:
        sys.path.remove(str(ROOT / "tools"))
    fresh = record_chapter7.recordings()
    assert sorted(fresh) == sorted(p.stem for p in record_chapter7.OUT.glob("*.json"))
    for name, program in fresh.items():
        stored = json.loads((record_chapter7.OUT / f"{name}.json").read_text())
        assert stored == json.loads(json.dumps(program)), f"{name}: run python tools/record_chapter7.py"


@pytest.mark.slow
def test_a_process_that_leaves_the_scripts_session_does_not_outlive_predict(tmp_path):
    # Before: killing the script's process group missed a grandchild that called setsid() and whose
    # parent had died (a double fork): it ran on, re-parented to init.
    pid_file = tmp_path / "escaped.pid"
    forker = tmp_path / "forker.py"
    forker.write_text(f"import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                      f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n    time.sleep(120)\n")
    script = tmp_path / "escapes.py"
    script.write_text(f"import os, subprocess, sys, time\n"
                      f"def step():\n"
                      f"    subprocess.run([sys.executable, {str(forker)!r}])   # its child forks, leaves, and exits\n"
                      f"    while not os.path.exists({str(pid_file)!r}):\n"
                      f"        time.sleep(0.05)\n")
    proc = cli("predict", script, "--no-what-if", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("the process that left the script's session was still running after predict returned")


# ---- 5. one rank of DDP on a fake process group
def test_a_ddp_step_records_its_bucket_and_the_gradients_it_copies(monkeypatch):
    from allocator_ref.predict.forecast import _live_at
    monkeypatch.setenv("WORLD_SIZE", "4")
    step = step_of("ddp_step.py")
    live_after_backward = {}
    for view in (False, True):
        program = record_program(step, view=view)
        events = program["device_traces"][0]
        ops = [e["frames"][0]["name"] for e in events if e["action"] == "alloc" and e["size"] == 2 * (4 * MiB + 4096)]
        assert "aten::empty.memory_format" in ops            # the one bucket (25 MiB cap holds both layers)
        live = _live_at(events, program["predict_windows"][0]["start"] - 1)
        assert [c["detail"] for c in program["predict_caveats"] if c["kind"] == "distributed"] == ["4"]
        live_after_backward[view] = sorted(size for size, _ in live.values() if size == 4 * MiB)
    # weights 2 x 4 MiB; without the view the 2 gradients of 4 MiB stay beside the bucket's copy of them
    assert live_after_backward[False] == [4 * MiB] * 4
    assert live_after_backward[True] == [4 * MiB] * 2


@pytest.mark.parametrize("version, wrapped", [(2, 1024 * 4096 + 4096),            # fully_shard(first Linear)
                                              (1, 2 * (1024 * 4096) + 4096 + 1024)])  # FSDP1 wraps the whole model
def test_fsdp_is_refused_with_the_parameter_bytes_at_stake(monkeypatch, version, wrapped):
    from allocator_ref.predict.caveats import NoAnswer
    from allocator_ref.predict.record import script_stand_ins
    monkeypatch.setenv("WORLD_SIZE", "4")
    with script_stand_ins():               # as predict imports a script: its `from ... import fully_shard` too
        step = step_of("fsdp_step.py")
    with pytest.raises(NoAnswer) as refusal:
        record_program(step, version=version)
    assert refusal.value.parameter_bytes == 4 * wrapped
    import torch.distributed as dist
    import torch.distributed.fsdp as fsdp
    assert not dist.is_initialized()                    # the fake group is gone again
    assert fsdp.fully_shard.__name__ == "fully_shard" and fsdp.fully_shard.__module__ == "torch.distributed.fsdp"


@pytest.mark.slow
def test_predict_never_answers_for_an_fsdp_step(tmp_path):
    env = dict(os.environ, WORLD_SIZE="4")
    proc = subprocess.run([sys.executable, "-m", "allocator_ref", "predict", str(SCRIPTS / "fsdp_step.py"),
                           "--no-what-if"], env={**env, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout      # no "fits", no number
    [line] = proc.stderr.strip().splitlines()
    assert "fsdp_step.py:13" in line                      # the script's own fully_shard line


@pytest.mark.slow
def test_a_cuda_object_without_a_stand_in_is_named_not_torchs_internals():
    proc = cli("predict", SCRIPTS / "uses_a_stream.py", "--no-what-if")
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert "torch.cuda.Stream()" in line and "uses_a_stream.py:6" in line
    assert "requires CUDA support" not in line and "streams.py" not in line


def test_chapter7s_prose_is_what_its_cells_print_without_torch():
    """The cells' no-torch branch replays the stored recordings: the prose's figures come out of it."""
    sys.path.insert(0, str(ROOT / "chapters"))
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import _course as course
        from claim_checks import stated
    finally:
        sys.path.remove(str(ROOT / "chapters"))
        sys.path.remove(str(ROOT / "tests"))
    stored = ROOT / "chapters" / "predict_recordings"
    p = forecast(json.loads((stored / "mlp_step_64.json").read_text()), "t4-16gb", what_if=True)
    largest = None
    for batch in (64, 1024, 4096, 16384):
        trial = forecast(json.loads((stored / f"mlp_step_{batch}.json").read_text()), "t4-16gb",
                         device_memory=int(0.5 * 2**30))
        largest = batch if trial.verdict == "fits" else largest
    import nbformat
    prose = stated(nbformat.read(ROOT / "chapters" / "07_diagnostics.ipynb", as_version=4))
    assert prose["ch7_predict_reserved"] == course.fmt(p.peak_reserved)
    assert prose["ch7_predict_fits"] == course.result_words(p.verdict == "fits", "it fits", "it does not fit")
    assert prose["ch7_predict_largest"] == str(largest)
