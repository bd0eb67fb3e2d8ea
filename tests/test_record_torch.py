"""Recording a real PyTorch model's allocations on the CPU, then replaying them on the allocators."""
import pytest

from allocator_ref.policies.registry import policy_names
from allocator_ref.trace import save_snapshot, load_snapshot
from allocator_ref.trace.record_torch import events_to_trace
from allocator_ref.trace.replay import replay


def test_profiler_events_become_paired_trace_entries():
    events = [
        {"ts": 1, "args": {"Addr": 100, "Bytes": 4096, "Device Type": 0}},
        {"ts": 2, "args": {"Addr": 200, "Bytes": 512, "Device Type": 0}},
        {"ts": 3, "args": {"Addr": 999, "Bytes": -64, "Device Type": 0}},     # made before recording
        {"ts": 4, "args": {"Addr": 100, "Bytes": -4096, "Device Type": 0}},
        {"ts": 5, "args": {"Addr": 300, "Bytes": 8, "Device Type": 1}},       # not a CPU event
    ]
    trace = events_to_trace(events)
    assert [(e["action"], e["addr"], e["size"]) for e in trace] == [
        ("alloc", 100, 4096), ("alloc", 200, 512),
        ("free_requested", 100, 4096), ("free_completed", 100, 4096)]


def test_a_small_gpt_block_recorded_on_the_cpu_replays_on_every_policy(tmp_path):
    torch = pytest.importorskip("torch", reason="the optional torch CPU wheel is not installed")
    from allocator_ref.trace.record_torch import record_torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(512, 128),
        torch.nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, batch_first=True),
        torch.nn.Linear(128, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 512, (8, 64))

    def step():
        loss = torch.nn.functional.cross_entropy(model(tokens).reshape(-1, 512), tokens.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    snap = record_torch(step)
    trace = snap["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert len(allocs) > 50
    # The logits (8 x 64 x 512 float32) are one of the storages the step allocates.
    assert 8 * 64 * 512 * 4 in {e["size"] for e in allocs}
    path = save_snapshot(snap, tmp_path / "gpt_block.pickle")
    loaded = load_snapshot(path)
    peaks = {}
    for policy in policy_names():                # every registered design
        report = replay(loaded, policy=policy, progress=False).to_json()
        assert report["allocs"] == len(allocs)
        peaks[policy] = report
    # Direct cudaMalloc reserves exactly what is live: the others can only reserve as much or more.
    live_peak = peaks["direct"]["peak_allocated"]
    for policy, report in peaks.items():
        assert report["peak_reserved"] >= live_peak * 0.99, policy
