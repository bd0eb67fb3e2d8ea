"""``PYTORCH_NPU_ALLOC_CONF``: torch_npu's own allocator settings, parsed as torch_npu parses them.

Mirrors ``CachingAllocatorConfig::parseArgs`` of ``torch_npu/csrc/core/npu/NPUAllocatorConfig.cpp``
(Ascend/pytorch, branch v2.11.0-26.1.0, the torch_npu release for PyTorch 2.11).  Where it differs
from PyTorch's ``PYTORCH_CUDA_ALLOC_CONF`` parser (../config.py):

* its own lexer (``lexArgs``) and ``consumeToken``, which *fails* on a missing ``:`` or ``,``
  (PyTorch's ``checkToken`` answer is ignored);
* its own keys: ``base_addr_aligned_kb``, ``page_size``, ``segment_size_mb``,
  ``multi_stream_lazy_reclaim``, ``pin_memory_expandable_segments``, ``pinned_mem_register``; and
  none of PyTorch's ``backend``, ``max_non_split_rounding_mb``, ``release_lock_on_cudamalloc`` ...;
* ``max_split_size_mb`` and ``garbage_collection_threshold`` next to an explicit
  ``expandable_segments:True`` is an error (PyTorch accepts the three together).

Every refusal is one line in the reader's language saying what was wrong and what to write instead.
A string is parsed into a fresh config, so a refused string leaves the allocator as it was.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass

from ...editions.messages import translator
from ..config import MiB, SIZE_MAX, AllocatorConfig, kRoundUpPowerOfTwoIntervals, _is_power_of_two

tr = translator("doctor")

# NPUAllocatorConfig.h: the constants the parser checks against.
kAlignRoundLarge = 16 * 1024          # kAlignRoundLarge: blocks of expandable segments start 16 KiB aligned
kLargeBuffer = 20 * MiB               # kLargeBuffer: default large segment (and max_split_size_mb's floor)
kMinLargeAlloc = 10 * MiB             # large_segment_size_mb must be more than this
k20MB, k512MB = 20, 512               # segment_size_mb's range

# Every key parseArgs accepts in v2.11.0-26.1.0, in its order.
NPU_KEYS = (
    "max_split_size_mb", "garbage_collection_threshold", "expandable_segments",
    "pin_memory_expandable_segments", "pinned_mem_register", "base_addr_aligned_kb", "page_size",
    "segment_size_mb", "large_segment_size_mb", "pinned_reserve_segment_size_mb",
    "roundup_power2_divisions", "pinned_use_background_threads", "multi_stream_lazy_reclaim",
    "per_process_memory_fraction",
)
_BOOL_KEYS = {
    "expandable_segments": "expandable_segments",
    "pin_memory_expandable_segments": "pin_memory_expandable_segments",
    "pinned_mem_register": "pinned_mem_register",
    "pinned_use_background_threads": "pinned_use_background_threads",
    "multi_stream_lazy_reclaim": "multi_stream_lazy_reclaim",
}


class NPUConfigError(ValueError):
    """A PYTORCH_NPU_ALLOC_CONF string torch_npu refuses (TORCH_CHECK in parseArgs)."""


def lex(text: str) -> list:
    """``lexArgs``: cut at , : [ ] (each its own token) and drop spaces (only ' ', not tabs)."""
    tokens, buffer = [], ""
    for ch in text:
        if ch in ",:[]":
            if buffer:
                tokens.append(buffer)
                buffer = ""
            tokens.append(ch)
        elif ch != " ":
            buffer += ch
    return tokens + ([buffer] if buffer else [])


@dataclass
class NPUAllocatorConfig(AllocatorConfig):
    """The settings of one NPU caching allocator (defaults = no PYTORCH_NPU_ALLOC_CONF).

    The fields the shared caching core reads keep PyTorch's names; the rest are torch_npu's own."""

    base_addr_aligned_size: int = kAlignRoundLarge     # m_base_addr_aligned_size
    page_size_1g: bool = False                         # m_page_size_1g
    segment_size_mb: int = 0                           # m_segment_size_mb (bytes, despite the name)
    multi_stream_lazy_reclaim: bool = False
    pin_memory_expandable_segments: bool = False
    pinned_mem_register: bool = False

    @classmethod
    def parse(cls, text: str = "", base=None, loaded_backend=None) -> "NPUAllocatorConfig":
        config = copy.deepcopy(base) if base is not None else cls()
        config.apply(text or "")
        return config

    @classmethod
    def from_env(cls, environ=None, rocm: bool = False, loaded_backend=None) -> "NPUAllocatorConfig":
        """``CachingAllocatorConfig::instance``: torch_npu reads PYTORCH_NPU_ALLOC_CONF and nothing else."""
        environ = os.environ if environ is None else environ
        return cls.parse(environ.get("PYTORCH_NPU_ALLOC_CONF", ""))

    def apply(self, text: str, loaded_backend=None) -> None:
        """``CachingAllocatorConfig::parseArgs``: large_segment_size_mb first, then every key in order."""
        if not isinstance(text, str):
            raise TypeError(tr("PYTORCH_NPU_ALLOC_CONF must be a string like 'expandable_segments:True', "
                               "got {kind}", kind=type(text).__name__))
        # "If empty, set the default values": these three are reset by every parse.
        self.max_split_size = SIZE_MAX
        self.garbage_collection_threshold = 0.0
        self.roundup_power2_divisions = [0] * kRoundUpPowerOfTwoIntervals
        self.last_settings = text
        tokens = lex(text)
        # "large_segment_size_mb should be read first": max_split_size_mb is checked against it.
        if "large_segment_size_mb" in tokens:
            self._large_segment_size(tokens, tokens.index("large_segment_size_mb"))
        # torch_npu has no max_non_split_rounding_mb: get_free_block compares with kLargeBuffer
        # (NPUCachingAllocator.cpp, get_free_block: "(*it)->size >= p.size() + kLargeBuffer").
        self.max_non_split_rounding_size = kLargeBuffer
        explicit_expandable = False
        i = 0
        while i < len(tokens):
            key = tokens[i]
            if key not in NPU_KEYS:
                raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: unrecognized option '{key}'; torch_npu "
                                        "accepts {keys}", key=key, keys=", ".join(NPU_KEYS)))
            explicit_expandable |= key == "expandable_segments"
            i = _PARSERS[key](self, tokens, i)
            if i + 1 < len(tokens):
                _expect(tokens, i + 1, ",", key)
                i += 1
            i += 1
        self._check_expandable(explicit_expandable)

    # ---- one parser per key (CachingAllocatorConfig::parse*), each returns the index of its value
    def _max_split_size(self, tokens, i):
        value = _digits(tokens, i, "max_split_size_mb")
        least = self.large_segment_size // MiB          # parseMaxSplitSize: ">= large_segment_size_ / kMB"
        if value < least:
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: max_split_size_mb must be at least {least} "
                                    "(the large segment size in MiB), got {value}", least=least, value=value))
        self.max_split_size = min(value, SIZE_MAX // MiB) * MiB
        return i + 2

    def _garbage_collection_threshold(self, tokens, i):
        value = _number(tokens, i, "garbage_collection_threshold", float)
        if not 0.0 < value < 1.0:                        # "set it 0.0~1.0", both ends excluded
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: garbage_collection_threshold must lie strictly "
                                    "between 0.0 and 1.0, got {value}", value=value))
        self.garbage_collection_threshold = value
        return i + 2

    def _bool(self, tokens, i):
        key = tokens[i]
        value = _value(tokens, i, key)
        if value not in ("True", "False"):
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: {key} takes True or False, got '{value}'",
                                    key=key, value=value))
        setattr(self, _BOOL_KEYS[key], value == "True")
        return i + 2

    def _base_addr_aligned_kb(self, tokens, i):
        value = _value(tokens, i, "base_addr_aligned_kb")
        # parseAddrAlignSize: digits only, no leading zeros, at most kAlignRoundLarge / 1024.
        if not value.isascii() or not value.isdigit() or str(int(value)) != value \
                or int(value) > kAlignRoundLarge // 1024:
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: base_addr_aligned_kb must be a whole number "
                                    "from 0 to 16, got '{value}'", value=value))
        self.base_addr_aligned_size = int(value) * 1024
        return i + 2

    def _page_size(self, tokens, i):
        value = _value(tokens, i, "page_size")
        if value != "1g":                                 # parsePageSize: "1g" is the only value
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: page_size accepts only 1g, got '{value}'",
                                    value=value))
        self.page_size_1g = True
        return i + 2

    def _segment_size_mb(self, tokens, i):
        value = _digits(tokens, i, "segment_size_mb")
        if not k20MB <= value <= k512MB:                  # parseSegmentSizeMb (deprecated key)
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: segment_size_mb must be a whole number from 20 "
                                    "to 512, got {value}", value=value))
        self.segment_size_mb = value * MiB
        return i + 2

    def _large_segment_size(self, tokens, i):
        value = _digits(tokens, i, "large_segment_size_mb")
        if value <= kMinLargeAlloc // MiB:                # parseLargeSegmentSize: "must be > 10 MB"
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: large_segment_size_mb must be more than 10, "
                                    "got {value}", value=value))
        self.large_segment_size = min(value, SIZE_MAX // MiB) * MiB
        return i + 2

    def _skip_value(self, tokens, i):
        """large_segment_size_mb (read in the first pass) and pinned_reserve_segment_size_mb
        (NPUAllocatorConfig reads it): only checked to be a number here, as parseArgs does."""
        _number(tokens, i, tokens[i], int)
        return i + 2

    def _roundup_power2_divisions(self, tokens, i):
        """``parseRoundUpPower2Divisions``: one number for all sizes, or [bound:divisions, ..., >:d]."""
        key = "roundup_power2_divisions"
        _expect(tokens, i + 1, ":", key)
        i += 2
        if i >= len(tokens):
            _missing(key)
        table = self.roundup_power2_divisions
        if tokens[i] != "[":
            table[:] = [_divisions(tokens[i])] * kRoundUpPowerOfTwoIntervals
            return i
        first, last = True, 0
        i += 1
        while i < len(tokens) and tokens[i] != "]":
            bound = tokens[i]
            _expect(tokens, i + 1, ":", key)
            if i + 2 >= len(tokens):
                _missing(key)
            value = _divisions(tokens[i + 2])
            i += 2
            if bound == ">":
                table[last + 1:] = [value] * (len(table) - last - 1)
            else:
                size = _number([key, ":", bound], 0, key, int)
                if not _is_power_of_two(size):
                    raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: the size bounds in roundup_power2_divisions "
                                            "must be powers of two, got {value}", value=bound))
                index = min(max(size.bit_length() - 1, 0), len(table) - 1)
                if first:
                    table[:index] = [value] * index
                    first = False
                table[index] = value
                last = index
            if i + 1 < len(tokens) and tokens[i + 1] != "]":
                _expect(tokens, i + 1, ",", key)
                i += 1
            i += 1
        if i >= len(tokens):
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: roundup_power2_divisions opens '[' but never "
                                    "closes it; end the list with ']'"))
        return i

    def _per_process_memory_fraction(self, tokens, i):
        value = _number(tokens, i, "per_process_memory_fraction", float)
        if not 0.0 <= value <= 1.0:
            raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: per_process_memory_fraction must lie in "
                                    "[0.0, 1.0], got {value}", value=value))
        self.per_process_memory_fraction = value
        return i + 2

    def _check_expandable(self, explicit: bool) -> None:
        """The end of parseArgs: torch_npu refuses (explicit) or drops (not explicit) expandable
        segments next to max_split_size_mb / garbage_collection_threshold."""
        others = self.max_split_size != SIZE_MAX or self.garbage_collection_threshold != 0
        if self.expandable_segments and others:
            if explicit:
                raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: max_split_size_mb and "
                                        "garbage_collection_threshold cannot be set together with "
                                        "expandable_segments:True; keep one of them"))
            self.expandable_segments = False

    # ---- what the allocator asks
    def expandable_page_size(self, is_small: bool) -> int:
        """``get_custom_expandable_segment_size``: 2 MiB pages in the small pool; in the large pool
        large_segment_size_mb if set, else the deprecated segment_size_mb, else 20 MiB."""
        if is_small:
            return 2 * MiB
        if self.large_segment_size != kLargeBuffer:
            return self.large_segment_size
        return self.segment_size_mb or kLargeBuffer

    def settings_dict(self) -> dict:
        """What this allocator runs with (a torch_npu snapshot records no ``allocator_settings``;
        the course's snapshots of the mirror do, under torch_npu's variable name)."""
        return {"PYTORCH_NPU_ALLOC_CONF": self.last_settings,
                "max_split_size": -1 if self.max_split_size == SIZE_MAX else self.max_split_size,
                "garbage_collection_threshold": self.garbage_collection_threshold,
                "expandable_segments": self.expandable_segments,
                "base_addr_aligned_kb": self.base_addr_aligned_size // 1024,
                "large_segment_size": self.large_segment_size,
                "roundup_power2_divisions": {str(2**k): d for k, d in enumerate(self.roundup_power2_divisions)}}


# ---- the helpers the parsers share (consumeToken, isDigit, stoi/stod) -------------------------
def _expect(tokens, i, token, key) -> None:
    """``consumeToken``: unlike PyTorch's checkToken, torch_npu fails on a missing separator."""
    if i >= len(tokens) or tokens[i] != token:
        raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: expected '{token}' after {key}; write key:value "
                                "pairs separated by commas", token=token, key=key))


def _missing(key):
    raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: {key} needs a value, as in {key}:{example}",
                            key=key, example=_EXAMPLES.get(key, "1")))


def _value(tokens, i, key) -> str:
    _expect(tokens, i + 1, ":", key)
    if i + 2 >= len(tokens) or tokens[i + 2] in ",:[]":
        _missing(key)
    return tokens[i + 2]


def _digits(tokens, i, key) -> int:
    """``isDigit`` then ``stoi``: a plain whole number, nothing else."""
    value = _value(tokens, i, key)
    if not (value.isascii() and value.isdigit()):
        raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: {key} must be a whole number, got '{value}'",
                                key=key, value=value))
    return int(value)


def _number(tokens, i, key, kind):
    """``stoi`` / ``stod``: a number (std::invalid_argument when there is none)."""
    value = _value(tokens, i, key)
    try:
        return kind(value)
    except ValueError:
        raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: {key} must be a number, got '{value}'",
                                key=key, value=value)) from None


def _divisions(token: str) -> int:
    value = _number(["roundup_power2_divisions", ":", token], 0, "roundup_power2_divisions", int)
    if value != 0 and not _is_power_of_two(value):
        raise NPUConfigError(tr("PYTORCH_NPU_ALLOC_CONF: roundup_power2_divisions takes a power of two or 0, "
                                "got {value}", value=value))
    return value


_EXAMPLES = {"roundup_power2_divisions": "4", "garbage_collection_threshold": "0.6",
             "per_process_memory_fraction": "0.9", "page_size": "1g", "max_split_size_mb": "128"}
_PARSERS = {
    "max_split_size_mb": NPUAllocatorConfig._max_split_size,
    "garbage_collection_threshold": NPUAllocatorConfig._garbage_collection_threshold,
    "base_addr_aligned_kb": NPUAllocatorConfig._base_addr_aligned_kb,
    "page_size": NPUAllocatorConfig._page_size,
    "segment_size_mb": NPUAllocatorConfig._segment_size_mb,
    "large_segment_size_mb": NPUAllocatorConfig._skip_value,
    "pinned_reserve_segment_size_mb": NPUAllocatorConfig._skip_value,
    "roundup_power2_divisions": NPUAllocatorConfig._roundup_power2_divisions,
    "per_process_memory_fraction": NPUAllocatorConfig._per_process_memory_fraction,
    **{key: NPUAllocatorConfig._bool for key in _BOOL_KEYS},
}
