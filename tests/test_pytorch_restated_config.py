"""How PyTorch 2.11 reads an allocator config, restated: AllocatorConfig_test.cpp and the C++ itself.

* c10/test/core/AllocatorConfig_test.cpp (allocator_config_test), with 2.11's key names.
  Not portable: its ``backend:async`` / ``release_lock_on_device_malloc`` /
  ``pinned_use_device_host_register`` keys and ``use_async_allocator()`` belong to a
  device-generic config that is not 2.11's (2.11 has cudaMallocAsync and the *_cuda* names),
  and its ``[...,2048:8>:2]`` case relies on a tokenizer that splits at '>'; 2.11's
  ConfigTokenizer does not (see test_missing_comma_reads_past_the_end below).
* c10/core/AllocatorConfig.h ConfigTokenizer: toSizeT = std::stoull, toDouble = std::stod,
  checkToken's answer ignored, reading past the end an internal assert.
* setAllocatorSettings: the Accelerator pass, then the CUDA hook, applied in place.
"""
from __future__ import annotations

import warnings

import pytest

from allocator_ref.caching import AllocatorConfig
from allocator_ref.caching.config import ConfigTokenizer
from allocator_ref.caching.tokenizer import AllocatorConfigWarning, stod, stoull
from caching_helpers import MiB, make_alloc  # noqa: F401

kMB = MiB


def divisions(config, size_mb):
    return config.divisions_for(size_mb * kMB)


def test_allocator_config_test():
    """AllocatorConfig_test.cpp allocator_config_test, the asserts 2.11's keys can express."""
    env = ("max_split_size_mb:40,"
           "max_non_split_rounding_mb:30,"
           "garbage_collection_threshold:0.5,"
           "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],"
           "expandable_segments:True,"
           "release_lock_on_cudamalloc:True,"
           "pinned_use_cuda_host_register:True,"
           "pinned_num_register_threads:8,"
           "pinned_use_background_threads:True")
    config = AllocatorConfig.from_env({"PYTORCH_ALLOC_CONF": env})
    assert config.last_settings == env
    assert config.max_split_size == 40 * kMB
    assert config.max_non_split_rounding_size == 30 * kMB
    assert config.garbage_collection_threshold == 0.5
    for size_mb, expected in [(32, 8), (64, 8), (128, 2), (256, 4), (512, 2), (1024, 4),
                              (2048, 1), (4096, 1), (8192, 1)]:
        assert divisions(config, size_mb) == expected, size_mb
    assert config.expandable_segments is True
    assert config.release_lock_on_cudamalloc is True
    assert config.pinned_use_cuda_host_register is True
    assert config.pinned_num_register_threads == 8
    assert config.pinned_use_background_threads is True

    env = "max_split_size_mb:20,max_non_split_rounding_mb:40,garbage_collection_threshold:0.8"
    config.apply(env)
    assert config.last_settings == env
    assert config.max_split_size == 20 * kMB
    assert config.max_non_split_rounding_size == 40 * kMB
    assert config.garbage_collection_threshold == 0.8

    env = "backend:native,expandable_segments:False,release_lock_on_cudamalloc:False"
    config.apply(env)
    assert config.last_settings == env
    assert config.backend == "native"
    assert config.expandable_segments is False
    assert config.release_lock_on_cudamalloc is False

    env = ("pinned_use_cuda_host_register:False,pinned_num_register_threads:4,"
           "pinned_use_background_threads:False")
    config.apply(env)
    assert config.last_settings == env
    assert config.pinned_use_cuda_host_register is False
    assert config.pinned_num_register_threads == 4
    assert config.pinned_use_background_threads is False


def test_missing_comma_reads_past_the_end():
    # AllocatorConfig_test.cpp's "[128:8,256:16,512:1,2048:8>:2]": 2.11 reads "8>" with stoull
    # as 8, then takes "2" as the next boundary and runs off the end (an internal assert).
    with pytest.warns(AllocatorConfigWarning):
        with pytest.raises(RuntimeError, match=r"^Index out of bounds in ConfigTokenizer"):
            AllocatorConfig.parse("roundup_power2_divisions:[128:8,256:16,512:1,2048:8>:2]")


# ------------------------------------------------------------- std::stoull / std::stod (item 9)
@pytest.mark.parametrize("token,value,lenient", [
    ("40", 40, False), ("+40", 40, False), ("040", 40, False),
    ("40MB", 40, True), ("40.9", 40, True), ("0x10", 0, True), ("7e3", 7, True),
    ("-5", 2**64 - 5, True), ("-0", 0, False), ("18446744073709551615", 2**64 - 1, False),
])
def test_stoull_reads_like_libstdcxx(token, value, lenient):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert stoull(token) == value
    assert bool([w for w in caught if issubclass(w.category, AllocatorConfigWarning)]) == lenient


@pytest.mark.parametrize("token", ["abc", "", "MB40", "-", "+x", "٤٠", "４０", "\u0664"])
def test_stoull_without_an_ascii_digit_fails_like_pytorch(token):
    # std::stoull reads ASCII 0-9 only: Arabic-Indic or fullwidth digits are "no number"
    with pytest.raises(ValueError, match=r"^stoull\b"):
        stoull(token)


def test_stoull_out_of_range():
    with pytest.raises(IndexError, match=r"^stoull\b"):
        stoull("18446744073709551616")


@pytest.mark.parametrize("token,value,lenient", [
    ("0.6", 0.6, False), ("0.6x", 0.6, True), (".5", 0.5, False), ("5.", 5.0, False),
    ("1e-1", 0.1, False), ("1e", 1.0, True), ("0x1p-1", 0.5, False), ("+0.25", 0.25, False),
    ("0.5,", 0.5, True),
])
def test_stod_reads_like_strtod(token, value, lenient):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert stod(token) == value
    assert bool([w for w in caught if issubclass(w.category, AllocatorConfigWarning)]) == lenient


@pytest.mark.parametrize("token", ["abc", "", "x0.5", "٠.٥"])
def test_stod_without_a_number_fails(token):
    with pytest.raises(ValueError, match=r"^stod\b"):
        stod(token)


@pytest.mark.parametrize("token", ["1e400", "1e-400"])
def test_stod_out_of_range(token):
    with pytest.raises(IndexError, match=r"^stod\b"):
        stod(token)


def test_issue_examples_are_read_as_pytorch_reads_them():
    with pytest.warns(AllocatorConfigWarning, match=r"'40MB'.*as 40"):
        assert AllocatorConfig.parse("max_split_size_mb:40MB").max_split_size == 40 * kMB
    with pytest.warns(AllocatorConfigWarning, match=r"'0\.6x'.*0\.6"):
        assert AllocatorConfig.parse("garbage_collection_threshold:0.6x").garbage_collection_threshold == 0.6
    with pytest.warns(AllocatorConfigWarning, match=r"wraps around"):
        c = AllocatorConfig.parse("max_split_size_mb:-5")
    # 2**64 - 5 MiB is clamped to SIZE_MAX / MiB, so the limit is huge but not "unlimited"
    assert c.max_split_size == (2**64 - 1) // kMB * kMB
    # checkToken's answer is ignored: a ',' where ':' belongs still reads the value
    with pytest.warns(AllocatorConfigWarning, match=r"checkToken"):
        assert AllocatorConfig.parse("expandable_segments,True").expandable_segments is True
    with pytest.raises(ValueError, match=r"^stoull\b"):
        AllocatorConfig.parse("max_split_size_mb:abc")
    with pytest.raises(ValueError, match=r"^stoull\b"):
        AllocatorConfig.parse("max_split_size_mb:٤٠")


def test_tokenizer_drops_only_ascii_whitespace():
    # ConfigTokenizer skips std::isspace characters of the "C" locale; a no-break space is kept
    assert ConfigTokenizer(" a :\tb\n,\x0bc\r:\x0cd").tokens == ["a", ":", "b", ",", "c", ":", "d"]
    assert ConfigTokenizer("a:\u00a0b").tokens == ["a", ":", "\u00a0b"]


# ------------------------------------------------------------------------- error texts (item 10)
@pytest.mark.parametrize("text,cls,message", [
    ("foo:1", ValueError, "Unrecognized key 'foo' in Accelerator allocator config."),
    ("pinned_num_register_threads:3", ValueError, "Number of register threads has to be power of 2, got 3"),
    ("pinned_num_register_threads:256", ValueError,
     "Number of register threads should be less than or equal to 128, got 256"),
    ("max_split_size_mb", RuntimeError, "Index out of bounds in ConfigTokenizer"),
    ("max_split_size_mb:", RuntimeError, "Index out of bounds in ConfigTokenizer"),
    ("expandable_segments:True,garbage_collection_threshold", RuntimeError,
     "Index out of bounds in ConfigTokenizer"),
    ("roundup_power2_divisions:[64:8", RuntimeError, "Index out of bounds in ConfigTokenizer"),
    ("backend:", RuntimeError, "Index out of bounds in ConfigTokenizer"),
])
def test_error_texts_are_pytorchs(text, cls, message):
    with pytest.raises(cls) as err:
        AllocatorConfig.parse(text)
    assert str(err.value) == message
    # PyTorch's class, and also the course's bad-input error
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("config", ["max_split_size_mb", "max_split_size_mb:abc",
                                    "garbage_collection_threshold:1e400", "backend:cudaMallocAsync"])
def test_cli_reports_a_bad_config_in_one_line(config, tmp_path, capsys):
    from allocator_ref.__main__ import main
    from allocator_ref.trace import save_snapshot
    path = save_snapshot({"segments": [], "device_traces": [[
        {"action": "segment_alloc", "addr": 2**21, "size": 2 * MiB, "stream": 0, "time_us": 0},
        {"action": "alloc", "addr": 2**21, "size": 512, "stream": 0, "time_us": 1}]],
        "allocator_settings": {}, "external_annotations": []}, tmp_path / "s.pickle")
    assert main(["replay", str(path), "--config", config]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_the_accelerator_pass_finishes_before_the_cuda_hook(make_alloc):
    a = make_alloc()
    # A bad CUDA value: every Accelerator key was applied first, whatever its position
    with pytest.raises(ValueError):
        a.set_allocator_settings("pinned_num_register_threads:3,max_split_size_mb:60,"
                                 "expandable_segments:True")
    assert a.config.max_split_size == 60 * kMB and a.config.expandable_segments is True
    assert a.snapshot()["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"].startswith("pinned_num")
    # A bad Accelerator value stops before the CUDA hook runs
    with pytest.raises(ValueError):
        a.set_allocator_settings("release_lock_on_cudamalloc:True,garbage_collection_threshold:2")
    assert a.config.release_lock_on_cudamalloc is False
    assert a.config.max_split_size == 2**64 - 1              # reset by parseArgs before it failed
    # the allocator still works with what was applied
    a.free(a.malloc(3 * MiB))


def test_hip_variable_only_on_rocm():
    env = {"PYTORCH_HIP_ALLOC_CONF": "max_split_size_mb:60"}
    assert AllocatorConfig.from_env(env).max_split_size == 2**64 - 1
    assert AllocatorConfig.from_env(env, rocm=True).max_split_size == 60 * kMB


def test_per_process_memory_fraction_from_config_is_allowed_over_total(make_alloc):
    # getMemoryFraction returns allowed_memory_maximum / totalGlobalMem, as PyTorch computes it
    a = make_alloc("per_process_memory_fraction:0.3")
    total = a.device.info.total_memory
    assert a.get_per_process_memory_fraction() == int(0.3 * total) / total
