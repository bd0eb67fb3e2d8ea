"""PYTORCH_CUDA_ALLOC_CONF parsing and validation, restated from PyTorch's parsers:
AcceleratorAllocatorConfig::parseArgs (c10/core/AllocatorConfig.cpp), then
CUDAAllocatorConfig::parseArgs (c10/cuda/CUDAAllocatorConfig.cpp)."""
from __future__ import annotations

import re

import pytest

import allocator_ref as ar
from allocator_ref.caching import AllocatorConfig, round_size
from caching_helpers import MiB, cur, make_alloc  # noqa: F401

DEFAULT_DIVS = {str(2**k): 0 for k in range(16)}


def settings(a):
    return a.snapshot()["allocator_settings"]


# ---------------------------------------- errors (parseArgs; test_allocator_settings' ValueErrors)
BAD = [
    # (config, regex the message must match)
    ("foo:1,bar:2", r"^Unrecognized key 'foo' in Accelerator allocator config\.$"),
    ("max_split_size_mb:40,bar:2", r"Unrecognized key 'bar'"),
    ("garbage_collection_threshold:1.2", r"garbage_collect_threshold is invalid, set it in \(0\.0, 1\.0\)"),
    ("garbage_collection_threshold:0", r"garbage_collect_threshold is invalid, set it in \(0\.0, 1\.0\)"),
    ("garbage_collection_threshold:1.0", r"garbage_collect_threshold is invalid, set it in \(0\.0, 1\.0\)"),
    # std::stod / std::stoull find no number: their what() is the function's name
    ("garbage_collection_threshold:abc", r"^stod$"),
    ("max_split_size_mb:2", r"CachingAllocator option max_split_size_mb too small, must be >= 20"),
    ("max_split_size_mb:19", r"CachingAllocator option max_split_size_mb too small, must be >= 20"),
    ("large_segment_size_mb:32,max_split_size_mb:31", r"max_split_size_mb too small, must be >= 32"),
    # large_segment_size_mb is parsed first, whatever its position
    ("max_split_size_mb:31,large_segment_size_mb:32", r"max_split_size_mb too small, must be >= 32"),
    ("max_non_split_rounding_mb:19", r"max_non_split_rounding_mb.*20"),
    ("large_segment_size_mb:10", r"CachingAllocator option large_segment_size_mb must be > 10 MB"),
    ("large_segment_size_mb:5", r"CachingAllocator option large_segment_size_mb must be > 10 MB"),
    ("release_lock_on_cudamalloc:none",
     r"Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'none'"),
    ("pinned_use_cuda_host_register:none",
     r"Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'none'"),
    ("max_split_size_mb:40,expandable_segments:maybe",
     r"Expected 'True' or 'False' at index 6 in ConfigTokenizer but got 'maybe'"),
    ("expandable_segments:true", r"Expected 'True' or 'False'"),
    ("pinned_use_background_threads:1", r"Expected 'True' or 'False'"),
    ("graph_capture_record_stream_reuse:yes", r"Expected 'True' or 'False'"),
    ("pinned_num_register_threads:none", r"^stoull$"),
    ("pinned_num_register_threads:1024",
     r"^Number of register threads should be less than or equal to 128, got 1024$"),
    ("pinned_num_register_threads:3", r"^Number of register threads has to be power of 2, got 3$"),
    ("pinned_reserve_segment_size_mb:0", r"greater than 0"),
    ("roundup_power2_divisions:3", r"For roundups, the divisions has to be power of 2 "),
    ("roundup_power2_divisions:0", r"For roundups, the divisions has to be power of 2 "),
    ("roundup_power2_divisions:[64:3,>:1]",
     r"For roundups, the divisions has to be power of 2 or 0 to disable roundup "),
    ("roundup_power2_divisions:[63:4,>:1]", r"For roundups, the intervals have to be power of 2 "),
    ("backend:foo", r"^Unknown allocator backend, options are native and cudaMallocAsync$"),
    ("per_process_memory_fraction:1.1", r"per_process_memory_fraction is invalid, set it in \[0\.0, 1\.0\]"),
    ("per_process_memory_fraction:-0.1", r"per_process_memory_fraction is invalid, set it in \[0\.0, 1\.0\]"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[b[0] for b in BAD])
def test_bad_config_raises_value_error(text, message):
    with pytest.raises(ValueError) as err:
        AllocatorConfig.parse(text)
    assert re.search(message, str(err.value)), str(err.value)


# c10/core/AllocatorConfig.h setAllocatorSettings: parseArgs (Accelerator pass) then the CUDA
# hook, both in place.  A rejected key leaves the keys before it applied, and
# last_allocator_settings_ is the rejected string.
@pytest.mark.parametrize("text,message", BAD, ids=[b[0] for b in BAD])
def test_bad_config_at_runtime_keeps_what_pytorch_keeps(make_alloc, text, message):
    a = make_alloc("max_split_size_mb:40,roundup_power2_divisions:4,garbage_collection_threshold:0.6,"
                   "expandable_segments:True,large_segment_size_mb:24")
    x = a.malloc(3 * MiB)
    before_stats = a.memory_stats()
    before_segments = a.segments(record=False)
    with pytest.raises(ValueError):
        a.set_allocator_settings(text)
    # the allocator's memory is untouched ...
    assert a.memory_stats() == before_stats
    assert a.segments(record=False) == before_segments
    # ... the settings string is the rejected one, and parseArgs reset its three values first
    assert settings(a)["PYTORCH_CUDA_ALLOC_CONF"] == text
    if "large_segment_size_mb" not in text:
        assert a.config.large_segment_size == 24 * MiB       # not reset by a parse
    a.free(x)


def test_keys_before_a_rejected_one_stay_applied(make_alloc):
    a = make_alloc()
    with pytest.raises(ValueError) as err:
        a.set_allocator_settings("max_split_size_mb:40,expandable_segments:True,bar:2")
    assert str(err.value) == "Unrecognized key 'bar' in Accelerator allocator config."
    assert a.config.max_split_size == 40 * MiB and a.config.expandable_segments is True
    # The Accelerator pass ran to completion before the CUDA hook: a bad CUDA value keeps
    # every Accelerator key, and CUDA keys before it.
    with pytest.raises(ValueError, match=r"got 3"):
        a.set_allocator_settings("release_lock_on_cudamalloc:True,pinned_num_register_threads:3,"
                                 "max_split_size_mb:60")
    assert a.config.max_split_size == 60 * MiB and a.config.release_lock_on_cudamalloc is True


def test_bad_constructor_config_raises():
    with pytest.raises(ValueError, match=r"Unrecognized key 'foo'"):
        ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "foo:1,bar:2")


# ------------------------------------------------------------------ good values
def test_valid_values_and_settings_dict(make_alloc):
    a = make_alloc()
    assert settings(a) == {
        "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
        "expandable_segments": False, "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
        "graph_capture_record_stream_reuse": False, "roundup_power2_divisions": DEFAULT_DIVS,
    }
    text = ("max_split_size_mb:40,garbage_collection_threshold:0.5,expandable_segments:True,"
            "pinned_num_register_threads:128,release_lock_on_cudamalloc:True,"
            "pinned_use_cuda_host_register:True,graph_capture_record_stream_reuse:True,"
            "roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    a.set_allocator_settings(text)
    s = settings(a)
    assert s["PYTORCH_CUDA_ALLOC_CONF"] == text
    assert s["max_split_size"] == 40 * MiB
    assert s["garbage_collection_threshold"] == 0.5
    assert s["expandable_segments"] is True
    assert s["pinned_num_register_threads"] == 128
    assert s["release_lock_on_cudamalloc"] is True
    assert s["pinned_use_cuda_host_register"] is True
    assert s["graph_capture_record_stream_reuse"] is True
    # buckets: index 0..6 -> 8 (the first entry fills the lower ones), 7..9 -> 2, 10 -> 1, 11..15 -> ">" = 1
    divs = [8] * 7 + [2] * 3 + [1] * 6
    assert s["roundup_power2_divisions"] == {str(2**k): divs[k] for k in range(16)}


def test_list_form_with_zero_and_gt():
    c = AllocatorConfig.parse("roundup_power2_divisions:[2:4,16:0,>:8]")
    # 2 MiB -> index 1 (and fills index 0); 16 MiB -> index 4; ">" fills 5..15; 2, 3 untouched (0)
    assert c.settings_dict()["roundup_power2_divisions"] == {
        str(2**k): v for k, v in enumerate([4, 4, 0, 0, 0] + [8] * 11)}


def test_whitespace_is_ignored():
    c = AllocatorConfig.parse(" max_split_size_mb : 40 , expandable_segments : True ")
    assert c.max_split_size == 40 * MiB and c.expandable_segments is True


def test_hip_aliases_accepted():
    c = AllocatorConfig.parse("release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True")
    assert c.release_lock_on_cudamalloc and c.pinned_use_cuda_host_register


def test_backend_values():
    assert AllocatorConfig.parse("backend:native").backend == "native"
    assert AllocatorConfig.parse("backend:cudaMallocAsync").backend == "cudaMallocAsync"


def test_per_process_memory_fraction_key(make_alloc):
    a = make_alloc("per_process_memory_fraction:0.5", profile="tiny-1gb")
    assert a.get_per_process_memory_fraction() == 0.5
    b = make_alloc("per_process_memory_fraction:1.0", profile="tiny-1gb")
    assert b.get_per_process_memory_fraction() == 1.0


# ------------------------------------- what a parse resets (AcceleratorAllocatorConfig::parseArgs)
def test_every_parse_resets_split_divisions_and_gc(make_alloc):
    a = make_alloc("max_split_size_mb:40,roundup_power2_divisions:4,garbage_collection_threshold:0.5,"
                   "expandable_segments:True,large_segment_size_mb:32")
    a.set_allocator_settings("release_lock_on_cudamalloc:True")
    s = settings(a)
    assert s["max_split_size"] == -1
    assert s["roundup_power2_divisions"] == DEFAULT_DIVS
    assert s["garbage_collection_threshold"] == 0.0
    # not reset: expandable_segments, large_segment_size
    assert s["expandable_segments"] is True
    assert a.config.large_segment_size == 32 * MiB
    a.set_allocator_settings("expandable_segments:False")
    assert settings(a)["release_lock_on_cudamalloc"] is True       # CUDA flags are not reset either


def test_large_segment_size_survives_a_new_parse(make_alloc):
    a = make_alloc("large_segment_size_mb:32")
    a.set_allocator_settings("")
    a.malloc(5 * MiB)
    assert cur(a, "reserved_bytes") == 32 * MiB


def test_parse_resets_max_non_split_rounding(make_alloc):
    """A new parse sets max_non_split_rounding back to large_segment_size, read first by
    AcceleratorAllocatorConfig::parseArgs (older AllocatorConfig::parseArgs left it alone);
    still to be confirmed on a 2.11 GPU."""
    a = make_alloc("max_split_size_mb:20,max_non_split_rounding_mb:100")
    x = a.malloc(100 * MiB)
    a.free(x)                                  # cached oversize 100 MiB block
    y = a.malloc(60 * MiB)                     # 100 < 60 + 100: the cached block is reused
    assert y.ptr == x.ptr and y.size == 100 * MiB
    a.free(y)
    a.set_allocator_settings("max_split_size_mb:20")   # rounding back to 20 MiB
    z = a.malloc(60 * MiB)                     # 100 >= 60 + 20: not reused, new segment
    assert z.ptr != x.ptr and z.size == 60 * MiB
    assert cur(a, "segment") == 2
    a.free(z)


def test_from_env_first_variable_wins(monkeypatch):
    env = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:100", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:40"}
    assert AllocatorConfig.from_env(env).max_split_size == 40 * MiB
    env = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:100", "PYTORCH_HIP_ALLOC_CONF": "max_split_size_mb:60"}
    # PYTORCH_HIP_ALLOC_CONF is read only by a ROCm build (parseEnvForBackend: #ifdef USE_ROCM)
    assert AllocatorConfig.from_env(env, rocm=True).max_split_size == 60 * MiB
    assert AllocatorConfig.from_env(env).max_split_size == 100 * MiB
    assert AllocatorConfig.from_env({}).max_split_size == AllocatorConfig().max_split_size
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:44")
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), read_env=True)
    assert a.memory_stats()["max_split_size"] == 44 * MiB
