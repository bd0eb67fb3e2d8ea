"""Predict a model's GPU memory, allocator included, before running it (no GPU needed).

record.py    the program's allocations, recorded on ``meta`` tensors (needs torch; the CPU wheel is enough)
unseen.py    what that recording cannot see (CUDA context, cuBLAS/cuBLASLt workspaces, NCCL ...), with sources
forecast.py  the recording replayed on the reference allocator for a chosen GPU: peaks, fit, stacks, sweep
sandbox.py   ``python -m allocator_ref predict SCRIPT``: the user's script in a bounded subprocess

    import allocator_ref.predict as P
    p = P.predict(step, profile="t4-16gb", batch_size=16)   # step(batch_size) builds with device="cuda"
    print(p.text())
"""
from .unseen import Unseen, cublas_workspace_bytes
from .forecast import Prediction, forecast, predict, replay_program


def record_program(*args, **kwargs):
    """See :func:`allocator_ref.predict.record.record_program` (imports torch only when called)."""
    from .record import record_program as _record
    return _record(*args, **kwargs)


__all__ = ["Prediction", "Unseen", "cublas_workspace_bytes", "forecast", "predict", "record_program",
           "replay_program"]
