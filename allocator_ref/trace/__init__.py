"""Traces, snapshots and replay (see events.py for the event vocabulary)."""
from .events import ACTIONS, TraceEntry, TraceRecorder

__all__ = ["ACTIONS", "TraceEntry", "TraceRecorder"]
