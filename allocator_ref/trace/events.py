"""Moved to ``allocator_ref/events.py`` (below ``caching/``, which records these events);
re-exported here for callers that import it from ``trace``."""
from ..events import *  # noqa: F401,F403
from ..events import ACTIONS, TraceEntry, TraceRecorder, python_frames  # noqa: F401
