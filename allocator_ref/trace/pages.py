"""The snapshot inside the files people post instead of the pickle: memory_viz pages and JSON.

``torch.cuda._memory_viz trace_plot`` / ``segment_plot`` (and ``torch.cuda.memory._snapshot``
fed to them) write an HTML page that carries the snapshot itself: ``_format_viz`` in
``torch/cuda/_memory_viz.py`` (PyTorch 2.1 to 2.13 at least) pickles the dict, pads it with
zero bytes to a multiple of 3, base64-encodes it and writes the page with::

    const local_files = [{"name": "snapshot.pickle", "base64": "gASV..."}]
    add_local_files(local_files, 'Active Memory Timeline')

and ``MemoryViz.js``'s ``add_local_files`` decodes ``base64`` and unpickles it.  That
``local_files`` list is also what people save as ``.json``, and others save the snapshot
dict itself with ``json.dump`` (tuples become lists, nothing else changes).

:func:`embedded_snapshot` turns any of these into the pickle's bytes or the plain object, so
the loader checks the embedded pickle exactly as it checks a pickle file (``snapshot.py``):
nothing in the page is run, only the JSON literal after ``local_files =`` is read.
"""
from __future__ import annotations

import base64
import binascii
import json
from typing import Union

from ..editions.messages import translator
from .snapshot_error import SnapshotError

tr = translator("doctor")

PAGE_MARKER = b"local_files ="      # _memory_viz_template: "const local_files = $SNAPSHOT"


def kind_of(data: bytes) -> str:
    """'pickle', 'html' or 'json', from the file's first meaningful byte."""
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] in (b"{", b"["):
        return "json"
    if head[:1] == b"<":
        return "html"
    return "pickle"


def embedded_snapshot(data: bytes, kind: str) -> Union[bytes, dict, list]:
    """The pickle bytes a page or a ``local_files`` JSON holds, or the snapshot a JSON file is."""
    if kind == "html":
        return _from_local_files(_page_json(data))
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:   # UnicodeDecodeError is a ValueError
        raise SnapshotError(tr("not valid JSON ({why}); expected a snapshot saved with json.dump "
                               "or memory_viz's local_files list", why=type(exc).__name__)) from None
    if _is_local_files(obj):
        return _from_local_files(obj)
    return obj


def _page_json(data: bytes):
    """The JSON literal after ``local_files =`` in a memory_viz page."""
    start = data.find(PAGE_MARKER)
    if start < 0:
        raise SnapshotError(tr("an HTML page without 'local_files = ...': only pages written by "
                               "torch.cuda._memory_viz (trace_plot, segment_plot) carry a snapshot"))
    try:
        text = data[start + len(PAGE_MARKER):].decode("utf-8")
        obj, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except (ValueError, RecursionError) as exc:
        raise SnapshotError(tr("the page's local_files is not valid JSON ({why}); expected the "
                               "list torch.cuda._memory_viz writes", why=type(exc).__name__)) from None
    return obj


def _is_local_files(obj) -> bool:
    return isinstance(obj, list) and bool(obj) and all(isinstance(f, dict) and "base64" in f for f in obj)


def _from_local_files(obj) -> bytes:
    """The one embedded file's pickle bytes (the page's zero padding is past the pickle's STOP)."""
    if not _is_local_files(obj):
        raise SnapshotError(tr("local_files is not a list of entries with 'name' and 'base64'; expected "
                               "the list torch.cuda._memory_viz writes"))
    if len(obj) != 1:
        raise SnapshotError(tr("the page holds {n} snapshots; save each one as its own file "
                               "(the course reads one run at a time)", n=len(obj)))
    encoded = obj[0]["base64"]
    if not isinstance(encoded, str):
        raise SnapshotError(tr("local_files 'base64' is not text; expected the base64 of a pickle"))
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise SnapshotError(tr("local_files 'base64' is not valid base64; expected the "
                               "base64 of a pickle")) from None
