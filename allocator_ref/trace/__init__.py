"""Traces, snapshots and replay.

(the event vocabulary, TraceEntry and TraceRecorder, is allocator_ref/events.py: caching/ records it)
snapshot.py  safe loading and saving of torch memory snapshots (file checks, size limit, streaming)
pages.py     the snapshot inside a memory_viz HTML page or a JSON file
safe_pickle.py  the pickle's opcodes checked before anything is built (no code, bounded shape)
stream_build.py  a big pickle built with its trace entries made records batch by batch
trace_record.py  TraceRecord: one trace entry, compact and read-only, read like its dict
validate.py  every field of a snapshot checked, one clear line saying where it is wrong
formats.py   PyTorch's older snapshot shapes (blocks without address, 2.0's history) made current
device_traces.py  one device's events (without 'snapshot' entries) and segments; which devices there are
trace_index.py  O(1) "what comes next" lookups that keep the replay linear
rmm_csv.py   RMM's logging_resource_adaptor CSV
rebuild.py   the allocator state at the start of a mid-run trace
rebuild_expandable.py  expandable segments laid out from a snapshot alone (state-only files)
recording.py the Recording: a snapshot loaded and checked once (load_recording), split by device
stage.py     what every replay stands on: the GPU (make_device), the allocator, streams, live blocks
engine.py    the verifier: checks PyTorch's recorded decisions event by event (and the plain what-if);
             engine_readings.py (reading ambiguous groups)
runner.py    the runner: one loop that replays a Program on any design and capacity
replay.py    replay a trace, verify it against PyTorch, or ask "what if"; TraceStepper
whatif.py    the anchored what-if: the program's actions, replayed under another setting
verify_facts.py  the totals after each event of a verify run, without drawing frames (the doctor)
replay_device.py  TraceDevice: the simulated GPU a replay runs on (follows the trace)
replay_report.py  what a replay reports
record_torch.py   a real PyTorch model's allocations, recorded on the CPU
"""
from ..events import ACTIONS, TraceEntry, TraceRecorder
from .snapshot import SnapshotError, load_snapshot, loads_snapshot, save_snapshot
from .rmm_csv import read_rmm_log
from .recording import Recording, load_recording


def replay(*args, **kwargs):
    """See :func:`allocator_ref.trace.replay.replay` (imported lazily: it pulls in the allocator)."""
    from .replay import replay as _replay
    return _replay(*args, **kwargs)


__all__ = ["ACTIONS", "TraceEntry", "TraceRecorder", "SnapshotError", "load_snapshot",
           "loads_snapshot", "save_snapshot", "read_rmm_log", "replay", "Recording", "load_recording"]
