"""``PYTORCH_CUDA_ALLOC_CONF``: parsing, validation and the values it controls.

Mirrors ``c10::CachingAllocator::AcceleratorAllocatorConfig::parseArgs``
(``c10/core/AllocatorConfig.cpp``) and ``CUDAAllocatorConfig::parseArgs``
(``c10/cuda/CUDAAllocatorConfig.cpp``) of PyTorch 2.11.

One difference from PyTorch, on the side of the learner: PyTorch keeps one
process-wide config; here every allocator owns an :class:`AllocatorConfig`, so
two designs can be compared side by side.

Like ``setAllocatorSettings``, a string is applied in place, in two passes (the
Accelerator keys, then the CUDA hook's keys): when a key is rejected, the keys
parsed before it stay applied and ``last_settings`` is the rejected string.
Numbers are read with PyTorch's ``std::stoull`` / ``std::stod`` leniency
(tokenizer.py), with a warning where PyTorch stays silent.
"""
from __future__ import annotations

import copy
import os
import warnings
from dataclasses import dataclass, field

from .tokenizer import AllocatorConfigWarning, ConfigAssertError, ConfigTokenizer  # noqa: F401

MiB = 1024 * 1024
kMinBlockSize = 512                 # every request is rounded to a multiple of 512 B
kSmallSize = 1 * MiB                # rounded sizes <= 1 MiB go to the small pool
kSmallBuffer = 2 * MiB              # small-pool segments are 2 MiB
kMinLargeAlloc = 10 * MiB           # large requests below this get a large_segment_size segment
kRoundLarge = 2 * MiB               # larger ones are rounded up to 2 MiB multiples
kDefaultLargeSegmentSize = 20 * MiB  # the historical kLargeBuffer, now large_segment_size_mb
kRoundUpPowerOfTwoIntervals = 16    # roundup_power2_divisions buckets: <2 MiB, [2,4) MiB, ... >=32 GiB
SIZE_MAX = 2**64 - 1
ONE_EXABYTE = 2**60                 # NativeCachingAllocator::allocate refuses sizes >= 1 EB

# Keys the Accelerator parser understands, then the ones the CUDA hook registers.
ACCELERATOR_KEYS = (
    "large_segment_size_mb", "max_split_size_mb", "max_non_split_rounding_mb",
    "garbage_collection_threshold", "roundup_power2_divisions", "expandable_segments",
    "pinned_use_background_threads",
)
CUDA_KEYS = (
    "backend", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
    "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
    "pinned_num_register_threads", "pinned_reserve_segment_size_mb",
    "graph_capture_record_stream_reuse", "per_process_memory_fraction",
)
ALL_KEYS = ACCELERATOR_KEYS + CUDA_KEYS
PINNED_MAX_REGISTER_THREADS = 128


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass
class AllocatorConfig:
    """The settings one caching allocator runs with (defaults = no PYTORCH_CUDA_ALLOC_CONF)."""

    max_split_size: int = SIZE_MAX
    max_non_split_rounding_size: int = kDefaultLargeSegmentSize
    large_segment_size: int = kDefaultLargeSegmentSize
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: list = field(default_factory=lambda: [0] * kRoundUpPowerOfTwoIntervals)
    expandable_segments: bool = False
    pinned_use_background_threads: bool = False
    backend: str = "native"
    release_lock_on_cudamalloc: bool = False
    pinned_use_cuda_host_register: bool = False
    pinned_num_register_threads: int = 1
    pinned_reserve_segment_size_mb: int = 0
    graph_capture_record_stream_reuse: bool = False
    per_process_memory_fraction: float = 1.0
    last_settings: str = ""

    # ---- building ----------------------------------------------------------
    @classmethod
    def parse(cls, text: str = "", base: "AllocatorConfig | None" = None,
              loaded_backend: "str | None" = None) -> "AllocatorConfig":
        """A new config: ``base`` (or the defaults) with ``text`` applied; ``base`` is not touched."""
        config = copy.deepcopy(base) if base is not None else cls()
        config.apply(text or "", loaded_backend)
        return config

    @classmethod
    def from_env(cls, environ=None, rocm: bool = False,
                 loaded_backend: "str | None" = None) -> "AllocatorConfig":
        """Read the environment the way PyTorch does: first of the variables present wins.

        ``PYTORCH_HIP_ALLOC_CONF`` counts only on a ROCm build (``rocm=True``).
        """
        value = env_config_string(environ, rocm)
        return cls.parse(value, loaded_backend=loaded_backend) if value is not None else cls()

    def apply(self, text: str, loaded_backend: "str | None" = None) -> None:
        """``setAllocatorSettings``: the Accelerator pass, then the CUDA hook, both in place.

        ``loaded_backend`` is the backend of the allocator this config belongs to: a
        ``backend`` key naming another one fails as in ``parseAllocatorConfig``.
        """
        if not isinstance(text, str):
            raise TypeError(f"the allocator config must be a string like 'max_split_size_mb:128', "
                            f"got {type(text).__name__}")
        tokens = ConfigTokenizer(text)
        self._accelerator_pass(text, tokens)
        self._cuda_pass(tokens, loaded_backend)

    def _accelerator_pass(self, text: str, tokens: ConfigTokenizer) -> None:
        """``AcceleratorAllocatorConfig::parseArgs``."""
        # Every parse resets these three ...
        self.max_split_size = SIZE_MAX
        self.roundup_power2_divisions = [0] * kRoundUpPowerOfTwoIntervals
        self.garbage_collection_threshold = 0.0
        self.last_settings = text
        # ... large_segment_size_mb is read first (every token is looked at, not only keys),
        # because the others are checked against it.
        i = 0
        while i < len(tokens):
            if tokens[i] == "large_segment_size_mb":
                i = self._parse_large_segment_size(tokens, i)
            i += 1
        self.max_non_split_rounding_size = self.large_segment_size
        i = 0
        while i < len(tokens):
            key = tokens[i]
            if key in _ACCELERATOR_PARSERS and key != "large_segment_size_mb":
                i = _ACCELERATOR_PARSERS[key](self, tokens, i)
            else:
                if key not in ALL_KEYS:
                    raise ValueError(f"Unrecognized key '{key}' in Accelerator allocator config.")
                i = tokens.skip_key(i)          # large_segment_size_mb (done) or a CUDA key
            i = _next_pair(tokens, i)

    def _cuda_pass(self, tokens: ConfigTokenizer, loaded_backend: "str | None") -> None:
        """``CUDAAllocatorConfig::parseArgs`` (the hook ``setAllocatorSettings`` calls second)."""
        used_async = used_native_option = False
        i = 0
        while i < len(tokens):
            key = tokens[i]
            if key == "backend":
                i = self._parse_backend(tokens, i, loaded_backend)
                used_async = self.backend == "cudaMallocAsync"
            elif key in _CUDA_PARSERS:
                i = _CUDA_PARSERS[key](self, tokens, i)
                used_native_option = True
            else:
                if key not in ALL_KEYS:
                    raise ValueError(f"Unrecognized key '{key}' in CUDA allocator config.")
                i = tokens.skip_key(i)
            i = _next_pair(tokens, i)
        if used_async and used_native_option:
            warnings.warn("backend:cudaMallocAsync ignores max_split_size_mb,"
                          "roundup_power2_divisions, and garbage_collect_threshold.", UserWarning,
                          stacklevel=4)

    # ---- one parser per key (AcceleratorAllocatorConfig::parse*, CUDAAllocatorConfig::parse*) --
    def _parse_large_segment_size(self, tokens, i):
        tokens.check_token(i + 1, ":")
        value = tokens.to_size_t(i + 2)
        minimum = kMinLargeAlloc // MiB
        if not value > minimum:
            raise ValueError(f"CachingAllocator option large_segment_size_mb must be > {minimum} MB")
        self.large_segment_size = min(value, SIZE_MAX // MiB) * MiB
        return i + 2

    def _parse_max_split_size_mb(self, tokens, i):
        self.max_split_size = self._mb_at_least_large_segment(tokens, i, "max_split_size_mb")
        return i + 2

    def _parse_max_non_split_rounding_mb(self, tokens, i):
        self.max_non_split_rounding_size = self._mb_at_least_large_segment(
            tokens, i, "max_non_split_rounding_mb")
        return i + 2

    def _mb_at_least_large_segment(self, tokens, i, key: str) -> int:
        """A size in MiB that may not be below large_segment_size (parseMaxSplitSize & co)."""
        tokens.check_token(i + 1, ":")
        value = tokens.to_size_t(i + 2)
        minimum = self.large_segment_size // MiB
        if value < minimum:
            raise ValueError(f"CachingAllocator option {key} too small, must be >= {minimum}")
        return min(value, SIZE_MAX // MiB) * MiB

    def _parse_garbage_collection_threshold(self, tokens, i):
        tokens.check_token(i + 1, ":")
        value = tokens.to_double(i + 2)
        if not 0 < value < 1.0:
            raise ValueError("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
        self.garbage_collection_threshold = value
        return i + 2

    def _parse_roundup_power2_divisions(self, tokens, i):
        tokens.check_token(i + 1, ":")
        i += 2
        if tokens[i] != "[":                       # single value: every bucket (kept for compatibility)
            value = tokens.to_size_t(i)
            if not _is_power_of_two(value):
                raise ValueError("For roundups, the divisions has to be power of 2 ")
            self.roundup_power2_divisions = [value] * kRoundUpPowerOfTwoIntervals
            return i
        divisions = self.roundup_power2_divisions
        first_value, last_index = True, 0
        i += 1
        while i < len(tokens) and tokens[i] != "]":
            value_index = i
            tokens.check_token(i + 1, ":")
            i += 2
            value = tokens.to_size_t(i)
            if not (value == 0 or _is_power_of_two(value)):
                raise ValueError("For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
            if tokens[value_index] == ">":         # every bucket after the last one listed
                for j in range(last_index + 1, kRoundUpPowerOfTwoIntervals):
                    divisions[j] = value
            else:
                boundary = tokens.to_size_t(value_index)     # in MiB
                if not _is_power_of_two(boundary):
                    raise ValueError("For roundups, the intervals have to be power of 2 ")
                index = min(max(boundary.bit_length() - 1, 0), kRoundUpPowerOfTwoIntervals - 1)
                if first_value:                    # the first entry also fills all lower buckets
                    for j in range(index):
                        divisions[j] = value
                    first_value = False
                divisions[index] = value
                last_index = index
            if tokens[i + 1] != "]":
                tokens.check_token(i + 1, ",")
                i += 1
            i += 1
        if i >= len(tokens):
            raise ConfigAssertError("Expected closing bracket ']' in ConfigTokenizer but reached end of config")
        return i

    def _parse_bool(self, tokens, i, attribute: str):
        tokens.check_token(i + 1, ":")
        setattr(self, attribute, tokens.to_bool(i + 2))
        return i + 2

    def _parse_backend(self, tokens, i, loaded_backend):
        """``parseAllocatorConfig`` (CUDA build; the ROCm build also takes hipMallocAsync)."""
        tokens.check_token(i + 1, ":")
        value = tokens[i + 2]
        if value not in ("native", "cudaMallocAsync"):
            raise ValueError("Unknown allocator backend, options are native and cudaMallocAsync")
        if loaded_backend is not None and value != loaded_backend:
            err = ConfigAssertError("Allocator backend parsed at runtime != allocator backend parsed "
                               f"at load time, {value} != {loaded_backend}")
            err.add_note("PyTorch chooses the backend once, from PYTORCH_CUDA_ALLOC_CONF when it "
                         "loads (see allocator_ref.make_allocator)")
            raise err
        self.backend = value
        return i + 2

    def _parse_pinned_num_register_threads(self, tokens, i):
        tokens.check_token(i + 1, ":")
        value = tokens.to_size_t(i + 2)
        if not _is_power_of_two(value):
            raise ValueError(f"Number of register threads has to be power of 2, got {value}")
        if value > PINNED_MAX_REGISTER_THREADS:
            raise ValueError("Number of register threads should be less than or equal to "
                             f"{PINNED_MAX_REGISTER_THREADS}, got {value}")
        self.pinned_num_register_threads = value
        return i + 2

    def _parse_pinned_reserve_segment_size_mb(self, tokens, i):
        tokens.check_token(i + 1, ":")
        value = tokens.to_size_t(i + 2)
        if value <= 0:
            raise ValueError("Pinned reserve segment size has to be greater than 0")
        self.pinned_reserve_segment_size_mb = value
        return i + 2

    def _parse_per_process_memory_fraction(self, tokens, i):
        tokens.check_token(i + 1, ":")
        value = tokens.to_double(i + 2)
        if not 0.0 <= value <= 1.0:
            raise ValueError("per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
        self.per_process_memory_fraction = value
        return i + 2

    # ---- what the allocator asks ---------------------------------------------
    def expandable_page_size(self, is_small: bool) -> int:
        """The page an expandable segment maps at a time (``ExpandableSegment``'s segment size):
        2 MiB in the small pool, large_segment_size in the large one."""
        return kSmallBuffer if is_small else self.large_segment_size

    def divisions_for(self, size: int) -> int:
        """``roundup_power2_divisions(size)``: the bucket is floor(log2 size) - 20, clamped to 0..15."""
        index = max(0, size.bit_length() - 1 - 20)
        return self.roundup_power2_divisions[min(index, kRoundUpPowerOfTwoIntervals - 1)]

    def settings_dict(self) -> dict:
        """The ``allocator_settings`` entry of a snapshot (``_snapshot()``)."""
        return {
            "PYTORCH_CUDA_ALLOC_CONF": self.last_settings,
            "max_split_size": -1 if self.max_split_size == SIZE_MAX else self.max_split_size,
            "garbage_collection_threshold": self.garbage_collection_threshold,
            "expandable_segments": self.expandable_segments,
            "pinned_num_register_threads": self.pinned_num_register_threads,
            "release_lock_on_cudamalloc": self.release_lock_on_cudamalloc,
            "pinned_use_cuda_host_register": self.pinned_use_cuda_host_register,
            "graph_capture_record_stream_reuse": self.graph_capture_record_stream_reuse,
            "roundup_power2_divisions": {str(2**k): d for k, d in enumerate(self.roundup_power2_divisions)},
        }


def _next_pair(tokens: ConfigTokenizer, i: int) -> int:
    """Step over the ',' after a value (``checkToken(++i, ",")``, answer ignored) to the next key."""
    if i + 1 < len(tokens):
        tokens.check_token(i + 1, ",")
        i += 1
    return i + 1


def _bool_parser(attribute: str):
    return lambda config, tokens, i: config._parse_bool(tokens, i, attribute)


# Which method reads which key, pass by pass (AcceleratorAllocatorConfig / CUDAAllocatorConfig).
_ACCELERATOR_PARSERS = {
    "large_segment_size_mb": AllocatorConfig._parse_large_segment_size,
    "max_split_size_mb": AllocatorConfig._parse_max_split_size_mb,
    "max_non_split_rounding_mb": AllocatorConfig._parse_max_non_split_rounding_mb,
    "garbage_collection_threshold": AllocatorConfig._parse_garbage_collection_threshold,
    "roundup_power2_divisions": AllocatorConfig._parse_roundup_power2_divisions,
    "expandable_segments": _bool_parser("expandable_segments"),
    "pinned_use_background_threads": _bool_parser("pinned_use_background_threads"),
}
_CUDA_PARSERS = {
    "release_lock_on_cudamalloc": _bool_parser("release_lock_on_cudamalloc"),
    "release_lock_on_hipmalloc": _bool_parser("release_lock_on_cudamalloc"),
    "pinned_use_cuda_host_register": _bool_parser("pinned_use_cuda_host_register"),
    "pinned_use_hip_host_register": _bool_parser("pinned_use_cuda_host_register"),
    "pinned_num_register_threads": AllocatorConfig._parse_pinned_num_register_threads,
    "pinned_reserve_segment_size_mb": AllocatorConfig._parse_pinned_reserve_segment_size_mb,
    "graph_capture_record_stream_reuse": _bool_parser("graph_capture_record_stream_reuse"),
    "per_process_memory_fraction": AllocatorConfig._parse_per_process_memory_fraction,
}


def env_config_string(environ=None, rocm: bool = False) -> "str | None":
    """The allocator config PyTorch reads from the environment, or None.

    ``AcceleratorAllocatorConfig::instance``: ``PYTORCH_CUDA_ALLOC_CONF``, then (ROCm
    builds only) ``PYTORCH_HIP_ALLOC_CONF``, then ``PYTORCH_ALLOC_CONF``; the first present wins.
    """
    environ = os.environ if environ is None else environ
    names = ("PYTORCH_CUDA_ALLOC_CONF",) + (("PYTORCH_HIP_ALLOC_CONF",) if rocm else ()) + \
        ("PYTORCH_ALLOC_CONF",)
    for name in names:
        if name in environ:
            return environ[name]
    return None


def round_size(size: int, config: AllocatorConfig) -> int:
    """``DeviceCachingAllocator::round_size``: 512 B multiples, or a power-of-two division."""
    if size < kMinBlockSize:
        return kMinBlockSize
    divisions = config.divisions_for(size)
    if divisions > 1 and size > kMinBlockSize * divisions:
        return roundup_power2_next_division(size, divisions)
    return kMinBlockSize * ((size + kMinBlockSize - 1) // kMinBlockSize)


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round ``size`` up to the next of ``divisions`` equal steps between two powers of two."""
    if _is_power_of_two(size):
        return size
    if divisions < 2:
        raise ValueError("Only 2 or more divisions are supported")
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return 2 * floor
    rounded = size & ~(step - 1)
    return rounded if rounded == size else rounded + step


def get_allocation_size(size: int, config: AllocatorConfig) -> int:
    """``get_allocation_size``: how big a segment a (rounded) request makes cudaMalloc ask for."""
    if size <= kSmallSize:
        return kSmallBuffer
    if size < kMinLargeAlloc:
        return config.large_segment_size
    return kRoundLarge * ((size + kRoundLarge - 1) // kRoundLarge)
