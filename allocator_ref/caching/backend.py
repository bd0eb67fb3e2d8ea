"""Which allocator the environment selects, read once as PyTorch does at load time.

Mirrors ``BackendStaticInitializer::parseEnvForBackend`` (end of
``c10/cuda/CUDACachingAllocator.cpp``) and ``forceUncachedAllocator``:

* the backend is chosen once, when ``libc10_cuda`` loads, from the first of
  ``PYTORCH_CUDA_ALLOC_CONF`` / (ROCm only) ``PYTORCH_HIP_ALLOC_CONF`` /
  ``PYTORCH_ALLOC_CONF`` that is set.  Only the ``backend`` key is read there,
  so with ``backend:cudaMallocAsync`` the other keys are never validated.
  ``cudaMallocAsync`` selects another allocator altogether (here the
  stream-ordered policy); ``torch.cuda.get_allocator_backend()`` names it, and
  a later ``backend`` setting naming the other one fails
  ("Allocator backend parsed at runtime != allocator backend parsed at load time");
* ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` turns caching off (uncached.py).
"""
from __future__ import annotations

import functools
import os
import warnings

from .config import env_config_string
from .tokenizer import ConfigAssertError, ConfigTokenizer

BACKENDS = ("native", "cudaMallocAsync")


def parse_env_for_backend(environ=None, rocm: bool = False) -> str:
    """``parseEnvForBackend``: "cudaMallocAsync" if the first ``backend`` key says so, else "native"."""
    text = env_config_string(environ, rocm)
    if text is None:
        return "native"
    tokens = ConfigTokenizer(text)
    i = 0
    while i < len(tokens):
        if tokens[i] == "backend":
            tokens.check_token(i + 1, ":")
            value = tokens[i + 2]
            if value == "cudaMallocAsync" or (rocm and value == "hipMallocAsync"):
                return "cudaMallocAsync"
            break                        # anything else (even a typo) means the native allocator
        i = tokens.skip_key(i)
        if i + 1 < len(tokens):
            tokens.check_token(i + 1, ",")
            i += 1
        i += 1
    return "native"


@functools.lru_cache(maxsize=1)
def _loaded_backend() -> str:
    """The backend chosen "at load time": the first time anyone asks, then fixed."""
    return parse_env_for_backend()


def get_allocator_backend() -> str:
    """``torch.cuda.get_allocator_backend()``: "native" or "cudaMallocAsync", from the environment."""
    return _loaded_backend()


def backend_mismatch_error(runtime: str, loaded: str) -> RuntimeError:
    """``parseAllocatorConfig``'s internal assert, for a backend other than the loaded one."""
    err = ConfigAssertError("Allocator backend parsed at runtime != allocator backend parsed at "
                       f"load time, {runtime} != {loaded}")
    err.add_note("PyTorch picks the backend once, from the environment, when it loads: build the "
                 "allocator the environment selects with allocator_ref.make_allocator()")
    return err


def check_env(name: str, environ=None) -> "bool | None":
    """``c10::utils::check_env``: "1" is True, "0" False, anything else is ignored with a warning."""
    environ = os.environ if environ is None else environ
    value = environ.get(name)
    if value is None:
        return None
    if value in ("0", "1"):
        return value == "1"
    warnings.warn(f"Ignoring invalid value for boolean flag {name}: {value}valid values are 0 or 1.",
                  UserWarning, stacklevel=3)
    return None


def force_uncached_from_env(environ=None) -> bool:
    """``forceUncachedAllocator``: PYTORCH_NO_CUDA_MEMORY_CACHING=1 (or the HIP name)."""
    return bool(check_env("PYTORCH_NO_CUDA_MEMORY_CACHING", environ)
                or check_env("PYTORCH_NO_HIP_MEMORY_CACHING", environ))
