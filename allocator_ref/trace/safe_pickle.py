"""Unpickle plain data only, with the shape bounded before anything is built.

``pickle.loads`` trusts the file: it looks up any class or function a pickle
names, and it builds whatever nesting the file asks for.  A memory snapshot is
plain data (dicts, lists, tuples, strings, numbers, booleans, None), so
:func:`loads_plain` first reads the opcodes without building anything
(``pickletools`` documents each one) and refuses the file if

* it names code: a global (``GLOBAL``, ``STACK_GLOBAL``, ``INST``), a call
  (``REDUCE``, ``OBJ``, ``NEWOBJ``, ``BUILD``), an extension code
  (``EXT1``/``EXT2``/``EXT4``: these are resolved from ``copyreg``'s cache
  without ever asking ``find_class``, so refusing globals alone is not enough),
  a persistent id or an out-of-band buffer;
* its values nest deeper than ``max_depth`` (a million-deep tuple used as a dict
  key makes CPython's ``hash()`` recurse in C until the process dies with
  SIGSEGV: Python's recursion limit does not apply there);
* it holds a reference cycle (nothing in a snapshot refers to itself);
* it expands to more than ``max_values`` values once shared references are
  counted each time they are used (pickle's memo lets a 4 MB file name one list
  a million times, and whoever walks the result does the work a million times).

Only then does the C unpickler build the objects, with every global refused a
second time (``find_class``).
"""
from __future__ import annotations

import io
import pickle
import struct
from array import array
from dataclasses import dataclass, field

from ..editions.messages import translator

# Opcodes that would run code or reach outside the file.
CODE_OPCODES = {
    0x63: "GLOBAL", 0x93: "STACK_GLOBAL", 0x69: "INST", 0x6F: "OBJ", 0x52: "REDUCE",
    0x62: "BUILD", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 0x82: "EXT1", 0x83: "EXT2",
    0x84: "EXT4", 0x50: "PERSID", 0x51: "BINPERSID", 0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}

# How each opcode is read, as a table indexed by the opcode byte (speed: one lookup per op).
_OTHER, _FIXED, _LENGTH, _LINE, _MEMO_GET, _MEMO_PUT, _CODE = range(7)
_KIND = [_OTHER] * 256
_WIDTH = [0] * 256
# Scalars with a fixed-size argument: NONE, NEWTRUE, NEWFALSE, BININT, BININT1, BININT2, BINFLOAT.
for _op, _width in ((0x4E, 0), (0x88, 0), (0x89, 0), (0x4A, 4), (0x4B, 1), (0x4D, 2), (0x47, 8)):
    _KIND[_op], _WIDTH[_op] = _FIXED, _width
# Scalars stored as length + bytes: BINSTRING, SHORT_BINSTRING, BINUNICODE, BINBYTES,
# SHORT_BINBYTES, LONG1, LONG4, SHORT_BINUNICODE, BINUNICODE8, BINBYTES8, BYTEARRAY8.
for _op, _width in ((0x54, 4), (0x55, 1), (0x58, 4), (0x42, 4), (0x43, 1), (0x8A, 1), (0x8B, 4),
                    (0x8C, 1), (0x8D, 8), (0x8E, 8), (0x96, 8)):
    _KIND[_op], _WIDTH[_op] = _LENGTH, _width
# Scalars written as a line of text: INT, LONG, FLOAT, STRING, UNICODE.
for _op in (0x49, 0x4C, 0x46, 0x53, 0x56):
    _KIND[_op] = _LINE
for _op in (0x67, 0x68, 0x6A):               # GET, BINGET, LONG_BINGET
    _KIND[_op] = _MEMO_GET
for _op in (0x70, 0x71, 0x72, 0x94):         # PUT, BINPUT, LONG_BINPUT, MEMOIZE
    _KIND[_op] = _MEMO_PUT
for _op in CODE_OPCODES:
    _KIND[_op] = _CODE
_LEN_FORMAT = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}

# What kind of container each opcode makes (a trace is a list in a list in the top dict).
_LIST_C, _DICT_C, _OTHER_C = 1, 2, 3
_CONTAINER_KIND = {0x5D: _LIST_C, 0x6C: _LIST_C, 0x7D: _DICT_C, 0x64: _DICT_C}
for _op in (0x29, 0x8F, 0x74, 0x91):
    _CONTAINER_KIND[_op] = _OTHER_C

SCALAR = -1      # a stack entry that is not a container
MISSING = -2     # a memo key never stored


tr = translator("doctor")          # a refusal in the reader's language; Python's own words stay fields


class UnsafePickle(ValueError):
    """The bytes are not plain data within the limits; the message says what and where."""


@dataclass
class Plan:
    """Where a snapshot pickle's trace entries are, noted by :func:`scan` as it walks the opcodes
    (``stream_build.py`` reads it to build the trace a batch at a time).

    A *trace batch* is a ``MARK ... APPENDS`` (or one ``APPEND``) into a list held by a list held
    by the top-level dict: ``snapshot["device_traces"][d]``, as ``pickle.dump`` writes it
    (``Pickler._batch_appends`` in CPython's ``pickle.py``: 1,000 items a batch)."""
    frames: array = field(default_factory=lambda: array("q"))       # where each FRAME opcode starts
    batch_ends: array = field(default_factory=lambda: array("q"))   # the byte after each batch's APPENDS
    batch_keys: array = field(default_factory=lambda: array("q"))   # per batch: first memo key it stored, end
    last_read: array = field(default_factory=lambda: array("i"))    # per memo key: see scan()
    shared_entries: bool = False      # a trace entry placed twice: build it the plain way (validate.py says so)
    explicit_keys: bool = False       # a PUT that is not the next key: free no memo entry early


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load the global '{module}.{name}'")


def loads_plain(data: bytes, max_depth: int, max_values: int):
    """The object the pickle holds, if it is plain data within the limits (else UnsafePickle)."""
    scan(data, max_depth, max_values)
    return build_scanned(io.BytesIO(data))


def build_scanned(stream, unpickler=None):
    """Build the objects of a pickle whose opcodes :func:`scan` has passed, reading ``stream``
    (bytes in memory, or the open file itself: snapshot.py's streaming path) with ``unpickler``
    (default: a plain-data one; stream_build.py passes its own)."""
    try:
        return (unpickler or _NoGlobals(stream)).load()
    except pickle.UnpicklingError as exc:
        raise UnsafePickle(str(exc)) from None
    except (EOFError, ValueError, IndexError, KeyError, TypeError, AttributeError, OverflowError,
            MemoryError, RecursionError) as exc:
        # The scan checks structure, not types: e.g. SETITEM on a list fails only here.
        raise UnsafePickle(tr("not a valid pickle ({why})", why=type(exc).__name__)) from None


def scan(data: bytes, max_depth: int, max_values: int, plan: "Plan | None" = None) -> int:
    """Walk the opcodes without building objects; refuse the shapes the module doc lists.

    Each container's depth and expanded size (itself, its scalars, and each container it
    holds, counted every time it is used) are summed as items are added: ``pickle.dump``
    builds every object completely before it places it in another or names it again, so a
    container placed somewhere is *sealed*, and items added to a sealed one are refused (only
    a reference cycle or a hand-made file does that).  Memory: three machine integers per
    container and one per memo entry, whatever the file holds (a list per container, as
    before, cost 3.4x the file).  Returns the largest expanded size.

    Given a :class:`Plan`, it also notes where the trace batches and FRAME opcodes are and,
    per memo key, when a GET reads it last: 0 never, else 1 + the number of trace batches
    ended before that read (the key is not needed once batch ``last_read - 1`` is built).
    """
    size = array("q")             # per container: 1 + its scalars + the sizes of what it holds
    depth = array("q")            # per container: 1 + the deepest container it holds
    sealed = bytearray()          # per container: 1 once placed in another, 2 for a trace entry
    kinds = bytearray()           # per container: its opcode's kind (_LIST, _DICT, _OTHER_CONTAINER)
    stack: list = []
    marks: list = []
    mark_keys: list = []          # per open MARK: how many memo entries were stored before it
    last_read = plan.last_read if plan is not None else None
    batch_no = 1                  # 1 + trace batches ended so far (what a GET notes in last_read)
    memo = array("q")             # memo key -> container id or SCALAR; MISSING where never stored
    stored = 0                    # memo entries stored (MEMOIZE's next key, as the unpickler counts)
    pos, end = 0, len(data)
    unpack = struct.unpack_from
    push = stack.append

    def fail(what: str):
        raise UnsafePickle(tr("not a valid pickle: {why} at byte {pos}", why=what, pos=pos))

    def pop_mark() -> list:
        if not marks:
            fail("no MARK before a container opcode")
        mark_keys.pop()
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    def container(kind: int, items=()) -> int:
        size.append(1)
        depth.append(1)
        sealed.append(0)
        kinds.append(kind)
        node = len(size) - 1
        add(node, items)
        return node

    def add(node: int, items) -> None:
        n = items.count(SCALAR) if items else 0
        total, deep = size[node] + n, depth[node]
        if n != len(items):
            if sealed[node]:
                raise UnsafePickle(tr("refused: the data refers to itself (a reference cycle) or fills a "
                                      "container after using it; a memory snapshot does neither"))
            for item in items:
                if item == SCALAR:
                    continue
                if item == node:
                    raise UnsafePickle(tr("refused: the data refers to itself (a reference "
                                          "cycle); a memory snapshot never does"))
                if sealed[item] == 2 and plan is not None:
                    plan.shared_entries = True     # a trace entry placed a second time
                sealed[item] = 1
                total += size[item]
                if depth[item] >= deep:
                    deep = depth[item] + 1
        if deep > max_depth:
            raise UnsafePickle(tr("refused: values nest deeper than {depth} levels "
                                  "(a memory snapshot nests about 6)", depth=max_depth))
        if total > max_values:
            raise UnsafePickle(tr(
                "refused: the data expands to more than {n:,} values once its shared "
                "references are counted each time they are used (a small file naming one list "
                "many times); raise the limit only for a file you trust", n=max_values))
        size[node], depth[node] = total, deep

    def memo_get(key: int) -> int:
        item = memo[key] if key < len(memo) else MISSING
        if item == MISSING:
            fail("memo entry used before it was stored")
        if last_read is not None:
            last_read[key] = batch_no
        return item

    def memo_put(key: int, item: int) -> None:
        nonlocal stored
        if key >= len(memo):
            if key > end:             # a real pickle stores fewer entries than it has bytes
                fail("memo index past the end of the file")
            memo.extend(array("q", [MISSING]) * (key + 1 - len(memo)))
            if last_read is not None:
                last_read.extend(array("i", [0]) * (len(memo) - len(last_read)))
        if memo[key] == MISSING:
            stored += 1
        memo[key] = item

    def trace_target() -> bool:
        """Is the list on top of the stack ``snapshot["device_traces"][d]`` (see Plan)?"""
        # The stack is [top dict, its keys and values so far..., "device_traces", traces, the
        # traces built so far..., this trace]; the open MARKs are the top dict's SETITEMS and,
        # with two devices or more, the traces' APPENDS.
        n = len(stack)
        if n < 4 or stack[0] != 0 or kinds[0] != _DICT_C or marks[:1] != [1] or len(marks) > 2:
            return False
        first = marks[1] if len(marks) == 2 else n - 1       # where the traces' items start
        return (first % 2 == 1 and first < n and stack[first - 2] == SCALAR
                and stack[first - 1] >= 0 and kinds[stack[first - 1]] == _LIST_C
                and stack[-1] >= 0 and kinds[stack[-1]] == _LIST_C)

    def trace_batch(items, start_keys: int) -> None:
        """Add a batch of trace entries, noting where it ends and which memo keys it stored."""
        nonlocal batch_no
        for item in items:
            if item == SCALAR or sealed[item]:
                plan.shared_entries = True     # a number, or a record already placed elsewhere
        add(stack[-1], items)
        for item in items:
            if item != SCALAR:
                sealed[item] = 2               # placed once, here: a second placement is noted
        plan.batch_ends.append(pos)
        plan.batch_keys.append(start_keys)
        plan.batch_keys.append(stored)
        batch_no += 1

    def target() -> int:
        if not stack or stack[-1] == SCALAR:
            fail("items added to something that is not a container")
        return stack[-1]

    u32 = struct.Struct("<I").unpack_from
    while pos < end:
        op = data[pos]
        pos += 1
        # The memo fetches first: they are three quarters of a real snapshot's opcodes, so
        # memo_get is written out here (a call per opcode was a third of the scan's time).
        if op == 0x6A and pos + 4 <= end:     # LONG_BINGET
            key = u32(data, pos)[0]
            item = memo[key] if key < len(memo) else MISSING
            if item == MISSING:
                fail("memo entry used before it was stored")
            if last_read is not None:
                last_read[key] = batch_no
            push(item)
            pos += 4
            continue
        if op == 0x68 and pos < end:          # BINGET
            key = data[pos]
            item = memo[key] if key < len(memo) else MISSING
            if item == MISSING:
                fail("memo entry used before it was stored")
            if last_read is not None:
                last_read[key] = batch_no
            push(item)
            pos += 1
            continue
        if op == 0x7D or op == 0x5D:          # EMPTY_DICT, EMPTY_LIST: container() written out, as above
            size.append(1)
            depth.append(1)
            sealed.append(0)
            kinds.append(_DICT_C if op == 0x7D else _LIST_C)
            push(len(size) - 1)
            continue
        if op == 0x94 and stack and stored == len(memo):     # MEMOIZE of the next key: memo_put's common case
            memo.append(stack[-1])
            if last_read is not None:
                last_read.append(0)
            stored += 1
            continue
        kind = _KIND[op]
        if kind == _FIXED:
            pos += _WIDTH[op]
            push(SCALAR)
        elif kind == _LENGTH:
            width = _WIDTH[op]
            if pos + width > end:
                fail("truncated length")
            pos += width + unpack(_LEN_FORMAT[width], data, pos)[0]
            push(SCALAR)
        elif kind == _LINE:
            nl = data.find(b"\n", pos)
            if nl < 0:
                fail("unterminated text argument")
            pos = nl + 1
            push(SCALAR)
        elif kind == _MEMO_GET:
            key, pos = _memo_arg(data, op, pos, fail)
            push(memo_get(key))
        elif kind == _MEMO_PUT:
            if not stack:
                fail("memo store with an empty stack")
            if op == 0x94:                    # MEMOIZE
                key = stored
            else:
                key, pos = _memo_arg(data, op, pos, fail)
                if plan is not None and (key != stored or key < len(memo) and memo[key] != MISSING):
                    plan.explicit_keys = True
            memo_put(key, stack[-1])
        elif kind == _CODE:
            name = CODE_OPCODES[op]
            message = (tr("refused to load the global at byte {pos} (pickle opcode {name}): "
                          "a memory snapshot holds only plain data, so this file is not a "
                          "snapshot or was tampered with", pos=pos - 1, name=name)
                       if name in ("GLOBAL", "STACK_GLOBAL", "INST")
                       else tr("refused to load the opcode at byte {pos} (pickle opcode {name}): "
                               "a memory snapshot holds only plain data, so this file is not a "
                               "snapshot or was tampered with", pos=pos - 1, name=name))
            raise UnsafePickle(message)
        elif op == 0x28:                      # MARK
            marks.append(len(stack))
            mark_keys.append(stored)
        elif op in (0x5D, 0x7D, 0x29, 0x8F):  # EMPTY_LIST, EMPTY_DICT, EMPTY_TUPLE, EMPTY_SET
            push(container(_CONTAINER_KIND[op]))
        elif op in (0x6C, 0x74, 0x64, 0x91):  # LIST, TUPLE, DICT, FROZENSET
            push(container(_CONTAINER_KIND[op], pop_mark()))
        elif op in (0x85, 0x86, 0x87):        # TUPLE1, TUPLE2, TUPLE3
            n = op - 0x84
            if len(stack) < n:
                fail("stack underflow")
            items = stack[-n:]
            del stack[-n:]
            push(container(_OTHER_C, items))
        elif op == 0x61:                      # APPEND
            if len(stack) < 2:
                fail("stack underflow")
            item = stack.pop()
            node = target()
            if plan is not None and trace_target():
                trace_batch([item], stored)
            else:
                add(node, [item])
        elif op == 0x73:                      # SETITEM
            if len(stack) < 3:
                fail("stack underflow")
            items = stack[-2:]
            del stack[-2:]
            add(target(), items)
        elif op in (0x65, 0x75, 0x90):        # APPENDS, SETITEMS, ADDITEMS
            start_keys = mark_keys[-1] if mark_keys else stored
            items = pop_mark()
            node = target()
            if plan is not None and op == 0x65 and trace_target():
                trace_batch(items, start_keys)
            else:
                add(node, items)
        elif op == 0x30:                      # POP
            if not stack:
                fail("stack underflow")
            stack.pop()
        elif op == 0x31:                      # POP_MARK
            pop_mark()
        elif op == 0x32:                      # DUP
            if not stack:
                fail("stack underflow")
            push(stack[-1])
        elif op == 0x80:                      # PROTO
            pos += 1
        elif op == 0x95:                      # FRAME: a buffering hint, no value
            if plan is not None:
                plan.frames.append(pos - 1)
            pos += 8
        elif op == 0x2E:                      # STOP
            if len(stack) != 1 or marks:
                fail("STOP with a malformed stack")
            return max(size, default=0)
        else:
            fail(f"unknown opcode {bytes([op])!r}")
        if pos > end:
            fail("truncated argument")
    raise UnsafePickle(tr("not a valid pickle: it ends before its STOP opcode (truncated file?)"))


def _memo_arg(data: bytes, op: int, pos: int, fail):
    """The memo index of GET/BINGET/LONG_BINGET/PUT/BINPUT/LONG_BINPUT and the position after it."""
    if op in (0x67, 0x70):                    # GET, PUT: decimal text
        nl = data.find(b"\n", pos)
        if nl < 0:
            fail("unterminated memo index")
        text = data[pos:nl]
        if not text.isdigit() or len(text) > 20:
            fail("bad memo index")
        return int(text), nl + 1
    if op in (0x68, 0x71):                    # BINGET, BINPUT: one byte
        if pos + 1 > len(data):
            fail("truncated memo index")
        return data[pos], pos + 1
    if pos + 4 > len(data):
        fail("truncated memo index")
    return struct.unpack_from("<I", data, pos)[0], pos + 4
