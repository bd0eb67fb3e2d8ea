"""``c10::CachingAllocator::ConfigTokenizer``: how PyTorch 2.11 reads an allocator config string.

Mirrors ``c10/core/AllocatorConfig.h``.  The string is cut at ``, : [ ]`` (each
its own token) and ASCII whitespace is dropped.  Numbers are read with the C++
standard library, and this is where PyTorch is more lenient than it looks:

* ``toSizeT`` is ``std::stoull``: it reads the longest run of ASCII digits at
  the start (after an optional sign) and ignores the rest, so ``40MB`` is 40; a
  minus sign wraps around (``-5`` is 2**64 - 5); only a token with no leading
  digit at all fails (``std::invalid_argument("stoull")``).
* ``toDouble`` is ``std::stod`` (``strtod``): decimal, hex (``0x1p-1``),
  ``inf``, ``nan``, with the same "ignore the rest" rule (``0.6x`` is 0.6).
* ``checkToken`` only *returns* whether a token is the expected ``:`` or ``,``
  and every caller ignores the answer, so ``expandable_segments,True`` passes.

The reference reads exactly as PyTorch does and, because this is a course,
also emits an :class:`AllocatorConfigWarning` naming what PyTorch did silently.
"""
from __future__ import annotations

import re
import sys
import warnings

ULLONG_MAX = 2**64 - 1
_ASCII_SPACE = frozenset(" \t\n\v\f\r")      # std::isspace in the "C" locale
_STOULL = re.compile(r"([+-]?)([0-9]+)")       # ASCII digits only: \d would accept other scripts
_STOD = re.compile(r"""[+-]?(?:
      0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?
    | (?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?
    | [iI][nN][fF](?:[iI][nN][iI][tT][yY])?
    | [nN][aA][nN](?:\([0-9A-Za-z_]*\))?
)""", re.X)


def _out_of_range(body: str, value: float) -> bool:
    """Would strtod set ERANGE?  Overflow to infinity, or a nonzero number too small for a double."""
    if not (body[:1].isdigit() or body[:1] == "."):
        return False                         # "inf" / "nan" are read as such
    if value in (float("inf"), float("-inf")):
        return True
    hexa = body[:2] in ("0x", "0X")
    mantissa = re.split(r"[pP]", body[2:])[0] if hexa else re.split(r"[eE]", body)[0]
    nonzero = re.search(r"[1-9a-fA-F]" if hexa else r"[1-9]", mantissa) is not None
    return nonzero and abs(value) < sys.float_info.min


class AllocatorConfigWarning(UserWarning):
    """PyTorch accepted part of the allocator config silently; here is what it did."""


# PyTorch's classes, and also ValueError: the course's "bad input" error, so one
# ``except ValueError`` catches every rejected config (as the CLI does).
class ConfigAssertError(RuntimeError, ValueError):
    """A ``TORCH_INTERNAL_ASSERT`` of the config parser (RuntimeError in PyTorch)."""


class ConfigRangeError(IndexError, ValueError):
    """``std::out_of_range`` from stoull / stod (IndexError through pybind11)."""


def _warn(message: str) -> None:
    warnings.warn(message, AllocatorConfigWarning, stacklevel=4)


def stoull(token: str) -> int:
    """``std::stoull(token)`` (base 10), as libstdc++ does it, with a warning where it is lenient."""
    match = _STOULL.match(token)
    if match is None:
        err = ValueError("stoull")           # std::invalid_argument; pybind11 makes it ValueError
        err.add_note(f"std::stoull found no number at the start of '{token}' (ASCII digits 0-9 only)")
        raise err
    sign, digits = match.groups()
    magnitude = int(digits)
    if magnitude > ULLONG_MAX:
        err = ConfigRangeError("stoull")           # std::out_of_range; pybind11 makes it IndexError
        err.add_note(f"'{token}' does not fit in 64 bits")
        raise err
    value = (-magnitude) % 2**64 if sign == "-" else magnitude
    if match.end() < len(token):
        _warn(f"PyTorch reads '{token}' with std::stoull as {value}: the rest, "
              f"'{token[match.end():]}', is silently ignored")
    elif sign == "-" and magnitude:
        _warn(f"PyTorch reads '{token}' with std::stoull as {value}: a negative number "
              f"wraps around to a huge unsigned one")
    return value


def stod(token: str) -> float:
    """``std::stod(token)`` (``strtod``), with a warning where it ignores part of the token."""
    match = _STOD.match(token)
    if match is None:
        err = ValueError("stod")
        err.add_note(f"std::stod found no number at the start of '{token}'")
        raise err
    text = match.group(0)
    body = text.lstrip("+-")
    if body[:2] in ("0x", "0X"):
        value = float.fromhex(text)
    elif body[:1] in "nN":                   # nan or nan(chars): the chars are ignored
        value = float("nan")
    else:
        value = float(text)
    if _out_of_range(body, value):
        err = ConfigRangeError("stod")             # strtod set ERANGE: std::out_of_range
        err.add_note(f"'{token}' overflows or underflows a double")
        raise err
    if match.end() < len(token):
        _warn(f"PyTorch reads '{token}' with std::stod as {value}: the rest, "
              f"'{token[match.end():]}', is silently ignored")
    return value


class ConfigTokenizer:
    """``ConfigTokenizer``: split on , : [ ] (each its own token), drop ASCII whitespace."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        buffer = ""
        for ch in text:
            if ch in ",:[]":
                if buffer:
                    self.tokens.append(buffer)
                    buffer = ""
                self.tokens.append(ch)
            elif ch not in _ASCII_SPACE:
                buffer += ch
        if buffer:
            self.tokens.append(buffer)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> str:
        """``operator[]`` / ``checkIndex``: reading past the end is an internal assert (RuntimeError)."""
        if i >= len(self.tokens):
            err = ConfigAssertError("Index out of bounds in ConfigTokenizer")
            err.add_note("the allocator config ended where a value was expected "
                         "(write key:value pairs separated by commas, lists in [ ])")
            raise err
        return self.tokens[i]

    def check_token(self, i: int, expected: str) -> bool:
        """``checkToken``: PyTorch's callers ignore the answer; the reference warns instead."""
        ok = self[i] == expected
        if not ok:
            _warn(f"expected '{expected}' at index {i} of the allocator config but got "
                  f"'{self.tokens[i]}'; PyTorch's ConfigTokenizer::checkToken result is ignored, "
                  f"so this is accepted as if '{expected}' were there")
        return ok

    def to_size_t(self, i: int) -> int:
        return stoull(self[i])

    def to_double(self, i: int) -> float:
        return stod(self[i])

    def to_bool(self, i: int) -> bool:
        token = self[i]
        if token not in ("True", "False"):
            raise ValueError(f"Expected 'True' or 'False' at index {i} in ConfigTokenizer but got '{token}'")
        return token == "True"

    def skip_key(self, i: int) -> int:
        """``skipKey``: from a key to the index of its value (or of the ``]`` closing a list)."""
        self.check_token(i + 1, ":")
        i += 2
        if self[i] != "[":
            return i
        i += 1
        while i < len(self.tokens) and self.tokens[i] != "]":
            i += 1
        if i >= len(self.tokens):
            raise ConfigAssertError("Expected closing bracket ']' in ConfigTokenizer but reached end of config")
        return i
