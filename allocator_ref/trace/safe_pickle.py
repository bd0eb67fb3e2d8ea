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

SCALAR = -1      # a stack entry that is not a container


tr = translator("doctor")          # a refusal in the reader's language; Python's own words stay fields


class UnsafePickle(ValueError):
    """The bytes are not plain data within the limits; the message says what and where."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load the global '{module}.{name}'")


def loads_plain(data: bytes, max_depth: int, max_values: int):
    """The object the pickle holds, if it is plain data within the limits (else UnsafePickle)."""
    check_shape(*scan(data), max_depth, max_values)
    try:
        return _NoGlobals(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise UnsafePickle(str(exc)) from None
    except (EOFError, ValueError, IndexError, KeyError, TypeError, AttributeError, OverflowError,
            MemoryError, RecursionError) as exc:
        # The scan checks structure, not types: e.g. SETITEM on a list fails only here.
        raise UnsafePickle(tr("not a valid pickle ({why})", why=type(exc).__name__)) from None


def scan(data: bytes) -> tuple:
    """Walk the opcodes without building objects: the containers and what each one holds.

    Returns ``(children, scalars)``: for container ``i``, the ids of the containers it
    holds, and how many scalars (numbers, strings, None...) it holds.
    """
    children: list = []
    scalars: list = []
    stack: list = []
    marks: list = []
    memo: dict = {}
    pos, end = 0, len(data)
    unpack = struct.unpack_from
    push = stack.append

    def fail(what: str):
        raise UnsafePickle(tr("not a valid pickle: {why} at byte {pos}", why=what, pos=pos))

    def pop_mark() -> list:
        if not marks:
            fail("no MARK before a container opcode")
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    def container(items=()) -> int:
        children.append([])
        scalars.append(0)
        add(len(children) - 1, items)
        return len(children) - 1

    def add(node: int, items) -> None:
        n = items.count(SCALAR) if items else 0
        scalars[node] += n
        if n != len(items):
            children[node].extend(item for item in items if item != SCALAR)

    def target() -> int:
        if not stack or stack[-1] == SCALAR:
            fail("items added to something that is not a container")
        return stack[-1]

    memo_get = memo.get
    from_bytes = int.from_bytes
    while pos < end:
        op = data[pos]
        pos += 1
        # The memo fetches first: they are three quarters of a real snapshot's opcodes.
        if op == 0x6A and pos + 4 <= end:     # LONG_BINGET
            item = memo_get(from_bytes(data[pos:pos + 4], "little"))
            pos += 4
            if item is None:
                fail("memo entry used before it was stored")
            push(item)
            continue
        if op == 0x68 and pos < end:          # BINGET
            item = memo_get(data[pos])
            pos += 1
            if item is None:
                fail("memo entry used before it was stored")
            push(item)
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
            if key not in memo:
                fail("memo entry used before it was stored")
            push(memo[key])
        elif kind == _MEMO_PUT:
            if not stack:
                fail("memo store with an empty stack")
            if op == 0x94:                    # MEMOIZE
                key = len(memo)
            else:
                key, pos = _memo_arg(data, op, pos, fail)
            memo[key] = stack[-1]
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
        elif op in (0x5D, 0x7D, 0x29, 0x8F):  # EMPTY_LIST, EMPTY_DICT, EMPTY_TUPLE, EMPTY_SET
            push(container())
        elif op in (0x6C, 0x74, 0x64, 0x91):  # LIST, TUPLE, DICT, FROZENSET
            push(container(pop_mark()))
        elif op in (0x85, 0x86, 0x87):        # TUPLE1, TUPLE2, TUPLE3
            n = op - 0x84
            if len(stack) < n:
                fail("stack underflow")
            items = stack[-n:]
            del stack[-n:]
            push(container(items))
        elif op == 0x61:                      # APPEND
            if len(stack) < 2:
                fail("stack underflow")
            item = stack.pop()
            add(target(), [item])
        elif op == 0x73:                      # SETITEM
            if len(stack) < 3:
                fail("stack underflow")
            items = stack[-2:]
            del stack[-2:]
            add(target(), items)
        elif op in (0x65, 0x75, 0x90):        # APPENDS, SETITEMS, ADDITEMS
            items = pop_mark()
            add(target(), items)
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
            pos += 8
        elif op == 0x2E:                      # STOP
            if len(stack) != 1 or marks:
                fail("STOP with a malformed stack")
            return children, scalars
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


def check_shape(children: list, scalars: list, max_depth: int, max_values: int) -> int:
    """Refuse nesting deeper than max_depth, cycles, and more than max_values values in all.

    A post-order walk with an explicit stack, so a hostile depth cannot exhaust Python's
    own.  Returns the number of values the largest container expands to.
    """
    n = len(children)
    depth = [0] * n
    size = [0] * n
    state = bytearray(n)        # 0 not met, 1 entered (on the current path), 2 done
    for root in range(n):
        if state[root]:
            continue
        todo = [root]
        while todo:
            node = todo[-1]
            kids = children[node]
            if state[node] == 0:             # entering: walk the children first
                state[node] = 1
                for kid in kids:
                    if state[kid] == 1:
                        raise UnsafePickle(tr("refused: the data refers to itself (a reference "
                                              "cycle); a memory snapshot never does"))
                    if state[kid] == 0:
                        todo.append(kid)
                continue
            todo.pop()
            if state[node] == 2:             # met again through another parent
                continue
            state[node] = 2
            depth[node] = 1 + max(map(depth.__getitem__, kids), default=0)
            if depth[node] > max_depth:
                raise UnsafePickle(tr("refused: values nest deeper than {depth} levels "
                                      "(a memory snapshot nests about 6)", depth=max_depth))
            size[node] = 1 + scalars[node] + sum(map(size.__getitem__, kids))
            if size[node] > max_values:
                raise UnsafePickle(tr(
                    "refused: the data expands to more than {n:,} values once its shared "
                    "references are counted each time they are used (a small file naming one list "
                    "many times); raise the limit only for a file you trust", n=max_values))
    return max(size, default=0)
