"""torch_npu's NPUCachingAllocator mirror (allocator_ref/caching/npu): each rule that differs from
PyTorch's, checked on the same requests against the CUDA mirror, and its PYTORCH_NPU_ALLOC_CONF parser.

The rules come from Ascend/pytorch v2.11.0-26.1.0, torch_npu/csrc/core/npu/NPUCachingAllocator.cpp
(round_size, malloc, get_custom_expandable_segment_size) and NPUAllocatorConfig.cpp (parseArgs)."""
import pytest

from allocator_ref.caching.allocator import CachingAllocator
from allocator_ref.caching.oom import OutOfMemoryError, format_size as fmt
from allocator_ref.caching.npu import NPU_KEYS, NPUAllocatorConfig, NPUCachingAllocator, NPUConfigError
from allocator_ref.device import open_device
from allocator_ref.policies.registry import make_allocator, policy_names

MiB = 1 << 20


def both(config=""):
    return NPUCachingAllocator(open_device("sim"), config), CachingAllocator(open_device("sim"), config)


@pytest.mark.parametrize("request_bytes, npu_block, cuda_block", [
    (1, 512, 512),            # 1 + 32 still fits 512
    (480, 512, 512),          # 480 + 32 = 512 exactly
    (481, 1024, 512),         # 481 + 32 spills into a second 512 B unit
    (512, 1024, 512),         # a multiple of 512 takes 512 B more on an Ascend NPU
    (4096, 4608, 4096),
    (3 * MiB, 3 * MiB + 512, 3 * MiB),   # large pool: the pad applies there too
])
def test_a_request_is_padded_32_bytes_before_rounding(request_bytes, npu_block, cuda_block):
    npu, cuda = both()
    assert npu.malloc(request_bytes).size == npu_block
    assert cuda.malloc(request_bytes).size == cuda_block


def test_blocks_follow_each_other_by_the_padded_size():
    npu, cuda = both()
    npu_ptrs = [npu.malloc(512).ptr for _ in range(3)]
    cuda_ptrs = [cuda.malloc(512).ptr for _ in range(3)]
    assert [b - a for a, b in zip(npu_ptrs, npu_ptrs[1:])] == [1024, 1024]
    assert [b - a for a, b in zip(cuda_ptrs, cuda_ptrs[1:])] == [512, 512]


def test_a_large_block_in_an_expandable_segment_starts_16_kib_aligned():
    # 1.5 MiB + 512 leaves the next block at 1.5 MiB + 1 KiB: torch_npu's malloc cuts the front up
    # to the next 16 KiB boundary off as a free block (base_addr_aligned_kb, default 16).
    npu, cuda = both("expandable_segments:True")
    first, second = npu.malloc(MiB + MiB // 2 + 512), npu.malloc(3 * MiB)
    assert second.ptr % 16384 == 0 and second.ptr - first.ptr == 1589248
    gap = [b for b in npu.snapshot()["segments"][0]["blocks"] if b["state"] == "inactive"][0]
    assert (gap["address"], gap["size"]) == (first.ptr + first.size, 15360)
    c_first, c_second = cuda.malloc(MiB + MiB // 2 + 512), cuda.malloc(3 * MiB)
    assert c_second.ptr == c_first.ptr + c_first.size and c_second.ptr % 16384 == 512


def test_alignment_follows_base_addr_aligned_kb_and_zero_switches_it_off():
    for kb, expect_mod in ((4, 0), (0, 1024)):
        npu = NPUCachingAllocator(open_device("sim"), f"expandable_segments:True,base_addr_aligned_kb:{kb}")
        npu.malloc(MiB + MiB // 2 + 512)
        second = npu.malloc(3 * MiB)
        assert second.ptr % (kb * 1024 or 16384) == expect_mod


def test_small_requests_and_plain_segments_are_never_realigned():
    npu = NPUCachingAllocator(open_device("sim"))          # expandable segments off: no alignment
    first, second = npu.malloc(MiB + MiB // 2 + 512), npu.malloc(3 * MiB)
    assert npu.snapshot()["segments"][0]["blocks"][0]["size"] >= first.size
    assert second.size == 3 * MiB + 512


@pytest.mark.parametrize("config, npu_page, cuda_page", [
    ("expandable_segments:True", 20 * MiB, 20 * MiB),
    ("expandable_segments:True,large_segment_size_mb:40", 40 * MiB, 40 * MiB),
    ("expandable_segments:True,segment_size_mb:30", 30 * MiB, None),    # torch_npu's own key
])
def test_expandable_growth_maps_pages_of_the_configured_size(config, npu_page, cuda_page):
    npu = NPUCachingAllocator(open_device("sim"), config)
    npu.record_memory_history()
    for _ in range(3):
        npu.malloc(15 * MiB)
    maps = [e["size"] for e in npu.snapshot()["device_traces"][0] if e["action"] == "segment_map"]
    assert maps and set(maps) == {npu_page}
    if cuda_page is None:
        with pytest.raises(ValueError):
            CachingAllocator(open_device("sim"), config)


def test_the_registry_builds_it_by_name():
    assert "npu" in policy_names()
    allocator = make_allocator(open_device("sim"), "npu", "expandable_segments:True")
    assert isinstance(allocator, NPUCachingAllocator) and allocator.config.expandable_segments


def test_read_env_reads_pytorch_npu_alloc_conf_only(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
    monkeypatch.setenv("PYTORCH_NPU_ALLOC_CONF", "base_addr_aligned_kb:8")
    npu = NPUCachingAllocator(open_device("sim"), read_env=True)
    assert npu.config.base_addr_aligned_size == 8192 and npu.memory_stats()["max_split_size"] == -1


# ---- PYTORCH_NPU_ALLOC_CONF ------------------------------------------------------------------
def test_every_key_of_the_release_is_accepted():
    text = ("max_split_size_mb:64,garbage_collection_threshold:0.6,pin_memory_expandable_segments:False,"
            "pinned_mem_register:False,base_addr_aligned_kb:8,page_size:1g,segment_size_mb:40,"
            "large_segment_size_mb:32,pinned_reserve_segment_size_mb:16,roundup_power2_divisions:[256:2,>:4],"
            "pinned_use_background_threads:True,multi_stream_lazy_reclaim:True,per_process_memory_fraction:0.5")
    config = NPUAllocatorConfig.parse(text)
    assert set(NPU_KEYS) - {"expandable_segments"} <= {part.split(":")[0] for part in text.split(",")}
    assert config.max_split_size == 64 * MiB and config.garbage_collection_threshold == 0.6
    assert config.base_addr_aligned_size == 8192 and config.page_size_1g
    assert config.segment_size_mb == 40 * MiB and config.large_segment_size == 32 * MiB
    assert config.roundup_power2_divisions[:9] == [2] * 9 and config.roundup_power2_divisions[9:] == [4] * 7
    assert config.multi_stream_lazy_reclaim and config.per_process_memory_fraction == 0.5
    assert config.max_non_split_rounding_size == 20 * MiB     # torch_npu keeps kLargeBuffer
    assert NPUAllocatorConfig.parse("roundup_power2_divisions:8").roundup_power2_divisions == [8] * 16


@pytest.mark.parametrize("text, what", [
    ("backend:cudaMallocAsync", "unrecognized option 'backend'"),
    ("max_non_split_rounding_mb:64", "unrecognized option"),
    ("expandable_segments True", "unrecognized option"),
    ("expandable_segments,True", "expected ':'"),            # PyTorch only warns; torch_npu refuses
    ("expandable_segments:True;max_split_size_mb:64", "takes True or False"),
    ("max_split_size_mb:64 garbage_collection_threshold:0.5", "whole number"),
    ("max_split_size_mb:10", "at least 20"),
    ("large_segment_size_mb:40,max_split_size_mb:30", "at least 40"),
    ("max_split_size_mb:40MB", "whole number"),
    ("garbage_collection_threshold:1.0", "strictly between"),
    ("garbage_collection_threshold:0", "strictly between"),
    ("garbage_collection_threshold:high", "must be a number"),
    ("expandable_segments:true", "True or False"),
    ("base_addr_aligned_kb:17", "from 0 to 16"),
    ("base_addr_aligned_kb:08", "from 0 to 16"),
    ("page_size:2m", "only 1g"),
    ("segment_size_mb:10", "from 20 to 512"),
    ("large_segment_size_mb:10", "more than 10"),
    ("roundup_power2_divisions:3", "power of two"),
    ("roundup_power2_divisions:[300:2]", "powers of two"),
    ("roundup_power2_divisions:[256:2", "never closes"),
    ("per_process_memory_fraction:1.5", "[0.0, 1.0]"),
    ("max_split_size_mb:", "needs a value"),
    ("expandable_segments:True,max_split_size_mb:64", "cannot be set together"),
    ("garbage_collection_threshold:0.5,expandable_segments:True", "cannot be set together"),
])
def test_a_bad_setting_is_refused_in_one_line_naming_it(text, what):
    with pytest.raises(NPUConfigError) as caught:
        NPUAllocatorConfig.parse(text)
    message = str(caught.value)
    assert message.startswith("PYTORCH_NPU_ALLOC_CONF: ") and what in message and "\n" not in message


def test_a_refused_setting_leaves_the_allocator_as_it_was():
    with pytest.raises(ValueError):
        NPUCachingAllocator(open_device("sim"), "expandable_segments:maybe")
    npu = NPUCachingAllocator(open_device("sim"), "expandable_segments:True")
    with pytest.raises(NPUConfigError):
        npu.set_allocator_settings("page_size:4k")
    assert npu.config.expandable_segments       # the keys before the refused one only
    assert npu.malloc(512).size == 1024         # and it still allocates by its rules


def test_a_config_that_is_not_a_string_is_refused():
    with pytest.raises(TypeError, match="PYTORCH_NPU_ALLOC_CONF must be a string"):
        NPUAllocatorConfig.parse(["expandable_segments:True"])


def test_memory_stats_has_the_keys_torch_npu_reports():
    npu, cuda = both()
    npu.free(npu.malloc(3 * MiB))
    cuda.free(cuda.malloc(3 * MiB))
    npu_keys, cuda_keys = set(npu.memory_stats()), set(cuda.memory_stats())
    assert cuda_keys - npu_keys == {"num_sync_all_streams", "num_device_alloc", "num_device_free"}
    assert npu_keys < cuda_keys and npu.memory_stats()["allocation.all.allocated"] == 1
    assert npu.memory_stats()["allocated_bytes.all.allocated"] == 3 * MiB + 512   # the pad is allocated too


def test_memory_summary_is_headed_as_torch_npu_heads_it():
    npu, cuda = both()
    npu.malloc(1000)
    cuda.malloc(1000)
    npu_lines, cuda_lines = npu.memory_summary().splitlines(), cuda.memory_summary().splitlines()
    assert "PyTorch NPU memory summary, device ID 0" in npu_lines[1]
    assert "NPU OOMs: 0" in npu_lines[3] and "npuMalloc retries: 0" in npu_lines[3]
    assert "PyTorch CUDA memory summary, device ID 0" in cuda_lines[1] and "cudaMalloc retries" in cuda_lines[3]
    assert [len(line) for line in npu_lines] == [len(line) for line in cuda_lines]    # the same 75 columns


def test_out_of_memory_is_worded_as_torch_npu_words_it():
    # NPUCachingAllocator.cpp, malloc: "NPU out of memory. Tried to allocate ... (NPU 0; ... total
    # capacity; ... already allocated; ... current active; ... free; ... reserved in total by PyTorch)."
    npu = NPUCachingAllocator(open_device("sim", profile="tiny-1gb"))
    keep = npu.malloc(5 * MiB)                  # 5 MiB + 32 B active in a 20 MiB segment
    big = npu.malloc(900 * MiB)                 # 900 MiB + 512 B block in a 900 MiB + 2 MiB segment
    free = npu.device.mem_get_info()[0]
    with pytest.raises(OutOfMemoryError) as err:
        npu.malloc(41 * MiB)                    # padded: 41 MiB + 512 B, alloc_size 42 MiB
    assert str(err.value) == (
        f"NPU out of memory. Tried to allocate 42.00 MiB (NPU 0; 1024.00 MiB total capacity; "
        f"{fmt(keep.size + big.size)} already allocated; {fmt(keep.size + big.size)} current active; "
        f"{fmt(free)} free; 922.00 MiB reserved in total by PyTorch)."
        "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
    assert npu.memory_stats()["num_ooms"] == 1
    npu.free(keep)                              # the state stays consistent: the cache still serves
    assert npu.malloc(5 * MiB).ptr == keep.ptr


def test_the_npu_out_of_memory_names_the_fraction_and_the_exabyte_limit():
    npu = NPUCachingAllocator(open_device("sim", profile="tiny-1gb"))
    npu.set_per_process_memory_fraction(100 / 1024)
    with pytest.raises(OutOfMemoryError, match=r"^NPU out of memory\. Tried to allocate 102\.00 MiB \(NPU 0; "
                       r".* free; 100\.00 MiB allowed; 0 bytes reserved in total by PyTorch\)\.If reserved"):
        npu.malloc(101 * MiB)
    with pytest.raises(OutOfMemoryError) as err:
        npu.malloc(1 << 60)
    assert str(err.value) == "NPU out of memory. Tried to allocate more than 1EB memory."
    cuda = CachingAllocator(open_device("sim", profile="tiny-1gb"))
    with pytest.raises(OutOfMemoryError, match=r"^CUDA out of memory\. Tried to allocate 2\.00 GiB\. GPU 0 "):
        cuda.malloc(2 << 30)                    # PyTorch's design keeps PyTorch's words


def test_the_pad_free_case_is_the_machines_fact_not_a_setting():
    # AddPadSize(): 0 only on an Ascend950 (or later) with CANN >= 9.1.0 (kMinDel32PaddingSizeCannVersion)
    from allocator_ref.caching.npu.rounding import add_pad_size
    assert [add_pad_size(soc, cann) for soc, cann in ((False, False), (True, False), (False, True), (True, True))] \
        == [32, 32, 32, 0]
    pad_free = NPUCachingAllocator(open_device("sim"), pad=add_pad_size(True, True))
    padded = NPUCachingAllocator(open_device("sim"))
    assert [pad_free.malloc(n).size for n in (512, 481, 3 * MiB)] == [512, 512, 3 * MiB]      # as on CUDA
    assert [padded.malloc(n).size for n in (512, 481, 3 * MiB)] == [1024, 1024, 3 * MiB + 512]
    with pytest.raises(ValueError, match=r"^pad is what torch_npu's AddPadSize\(\) adds: 32 .* got 16$"):
        NPUCachingAllocator(open_device("sim"), pad=16)
    with pytest.raises(ValueError, match="got True"):
        NPUCachingAllocator(open_device("sim"), pad=True)
