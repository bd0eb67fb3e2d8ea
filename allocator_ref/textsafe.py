"""Text from a file, made safe to print on a terminal.

A snapshot is shared data: its frame names, file names and paths are whatever
the file says.  Printed raw, an escape sequence in a frame name can retitle the
terminal, clear the screen, or move the cursor back and overwrite the verdict
line (``\\r``, ``\\x1b[1A``); a right-to-left override can make text read
backwards.  ``escape`` writes every such character as a visible escape
(``\\x1b``, ``\\u202e``) and keeps newlines and tabs; the CLI sends everything
it prints through :class:`EscapingWriter` (see ``__main__.py``), so no report
needs to remember to.
"""
from __future__ import annotations

import re
from typing import Any

# C0 controls except tab and newline, DEL, C1 controls; the line/paragraph separators;
# the bidirectional marks, embeddings, overrides and isolates.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every terminal control character written as a visible escape."""
    return UNSAFE.sub(_visible, text)


class EscapingWriter:
    """A stdout/stderr stand-in that escapes control characters, and what the stream's
    encoding cannot write (as ``\\u...``, instead of a UnicodeEncodeError)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        safe = escape(text)
        encoding = getattr(self._stream, "encoding", None)
        if encoding:
            try:
                safe.encode(encoding)
            except (UnicodeEncodeError, LookupError):
                try:
                    safe = safe.encode(encoding, errors="backslashreplace").decode(encoding)
                except LookupError:
                    safe = safe.encode("ascii", errors="backslashreplace").decode("ascii")
        self._stream.write(safe)
        return len(text)

    def __getattr__(self, name: str) -> Any:      # flush, fileno, isatty, encoding ...
        return getattr(self._stream, name)
