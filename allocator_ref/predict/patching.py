"""Set attributes for the length of a ``with`` block and put the originals back after it, whatever
happens inside: how the recorder stands in for ``torch.cuda`` calls, autocast and the memory-history
functions while a script's step runs on meta tensors (record.py, caveats.py, autocast.py)."""
from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def patched(patches: list):
    """``patches`` is a list of ``(owner, name, value)``: each ``owner.name`` is ``value`` inside the block."""
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in originals:
            setattr(owner, name, value)
