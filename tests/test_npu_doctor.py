"""The doctor on a torch_npu run: it replays torch_npu's design and answers in PYTORCH_NPU_ALLOC_CONF terms
(memory_doctor/npu_advice.py); a CUDA run's answer is unchanged."""
import pytest

import allocator_ref as ar
from allocator_ref.caching.npu import NPUCachingAllocator
from allocator_ref.device import SimDevice
from allocator_ref.memory_doctor import examples

from npu_traces import MiB, torch_npu_shape


def fragmented_npu_run(config=""):
    """examples.fragmentation_run on the NPU mirror: 6 MiB tensors, two of every three freed, then 200 MiB."""
    a = NPUCachingAllocator(SimDevice("tiny-1gb"), config)
    a.record_memory_history(max_entries=1_000_000)
    live = [a.malloc(6 * MiB) for _ in range(120)]
    for i, x in enumerate(live):
        if i % 3:
            a.free(x)
    try:
        a.malloc(200 * MiB)          # runs out of memory unless expandable segments reuse the holes
    except ar.OutOfMemoryError:
        pass
    return torch_npu_shape(a.snapshot(), workspace=True)


@pytest.fixture(scope="module")
def npu_report():
    return ar.doctor(fragmented_npu_run()).to_json()


def test_the_doctor_reproduces_a_torch_npu_run_and_prescribes_in_its_terms(npu_report):
    assert npu_report["verified"] and npu_report["allocs_exact"] == npu_report["allocs"]
    assert npu_report["oom_count"] == 1
    assert npu_report["recommended_line"] == "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True"
    rows = {t["kind"]: t for t in npu_report["remedies"]}
    assert rows["recorded"]["mismatch"] is None and rows["recorded"]["fits"] is False
    assert all(t["policy"] == "npu" for t in npu_report["remedies"] if t["kind"] != "async")
    assert all(t["line"].startswith("PYTORCH_NPU_ALLOC_CONF=") for t in npu_report["remedies"])


def test_there_is_no_cudamallocasync_row_on_an_npu(npu_report):
    row = next(t for t in npu_report["remedies"] if t["kind"] == "async")
    assert row["skip_reason"] == "not-on-npu" and row["peak_reserved"] == 0


def test_a_combination_torch_npu_refuses_is_never_offered():
    report = ar.doctor(fragmented_npu_run("expandable_segments:True"), device_memory=1.0).to_json()
    refused = [t for t in report["remedies"] if t["skip_reason"] == "refused-by-torch-npu"]
    assert {t["kind"] for t in refused} == {"max_split", "gc"} and all(t["peak_reserved"] == 0 for t in refused)
    assert report["verified"]


def test_a_cuda_run_is_still_answered_in_pytorch_cuda_alloc_conf_terms():
    report = ar.doctor(examples.fragmentation_run()).to_json()
    assert report["recommended_line"].startswith("PYTORCH_CUDA_ALLOC_CONF=")
    assert all(t["policy"] in ("caching", "stream_ordered") for t in report["remedies"])


def test_the_doctor_runs_on_an_atlas_profile_and_says_so():
    from allocator_ref.device import load_profile
    report = ar.doctor(fragmented_npu_run(), profile="atlas-800t-a2-64gb").to_json()
    assert report["simulated_gpu"] == "atlas-800t-a2-64gb" and report["verified"]
    assert load_profile("atlas-800t-a2-64gb").total_memory == 64 * 2**30
    assert load_profile("atlas-300i-duo-48gb").total_memory == 48 * 2**30


def test_the_what_if_table_of_an_npu_run_tries_torch_npu_settings_first():
    from allocator_ref.__main__ import compare_rows
    rows = compare_rows(fragmented_npu_run())
    assert rows[0]["policy"] == "npu" and rows[0]["reproduces"] is True and not rows[0]["prediction"]
    knobs = [r for r in rows if r["policy"] == "npu"]
    assert [r["config"] for r in knobs][1:] == ["expandable_segments:True", "max_split_size_mb:128",
                                                "roundup_power2_divisions:4"]
    pytorch = next(r for r in rows if r["policy"] == "caching")
    assert pytorch["prediction"] and pytorch["peak_reserved"] > 0      # PyTorch's design, as another design
    assert rows[0]["peak_allocated"] > pytorch["peak_allocated"]       # every block carries torch_npu's pad


# ---- the doctor speaks of the NPU (memory_doctor/device_words.py) ---------------------------------
CUDA_ONLY = ("cudaMemGetInfo", "cuMemMap", "cudaMalloc ", "cudaMalloc)", "cudaFree", "torch.cuda.", "CUDA context",
             "PyTorch's address")      # (the skipped row names cudaMallocAsync: torch_npu has none)


@pytest.fixture(scope="module")
def npu_reports(tmp_path_factory):
    """One NPU run, doctored in English and in Chinese, with no --profile."""
    from allocator_ref.editions import language as lang
    english = ar.doctor(fragmented_npu_run())
    with lang.speaking("zh"):
        chinese = ar.doctor(fragmented_npu_run())
    return english, chinese


def test_an_npu_run_is_replayed_on_an_atlas_card_when_no_profile_is_named(npu_reports, tmp_path):
    english, _ = npu_reports
    assert english.to_json()["simulated_gpu"] == "atlas-800t-a2-64gb"
    assert ar.doctor(examples.fragmentation_run()).to_json()["simulated_gpu"] == "h100-80gb"
    import json
    import pickle
    from contextlib import redirect_stdout
    from io import StringIO
    from allocator_ref.__main__ import main
    path = tmp_path / "npu_run.pickle"
    path.write_bytes(pickle.dumps(fragmented_npu_run()))
    for argv, profile in ((["doctor", str(path), "--json"], "atlas-800t-a2-64gb"),
                          (["doctor", str(path), "--json", "--profile", "atlas-300i-duo-48gb"], "atlas-300i-duo-48gb")):
        out = StringIO()
        with redirect_stdout(out):
            assert main(argv) == 0
        assert json.loads(out.getvalue())["simulated_gpu"] == profile


def test_the_doctor_names_npu_calls_on_an_npu_run(npu_reports):
    english, _ = npu_reports
    text, page = english.text(), english.html()
    for name in ("aclrtGetMemInfo", "aclrtMapMem/aclrtUnmapMem", "torch_npu's address", "like an NPU with",
                 "rounded as torch_npu rounds it (a multiple of 512 B, after 32 B of padding)",
                 '"160.0 MiB free": what aclrtGetMemInfo reported', '"240.0 MiB already allocated"',
                 '"800.0 MiB reserved in total by PyTorch": 560.0 MiB of it'):
        assert name in text, name
    assert not [word for word in CUDA_ONLY if word in text or word in page]
    assert "torch_npu's NPUCachingAllocator" in page and "simulated</i> NPU" in page
    assert english.to_json()["judgement"]["rule"].startswith("a failed request is a shortage when, rounded as torch_npu")


def test_a_cuda_run_still_names_cuda_calls():
    text = ar.doctor(examples.fragmentation_run()).text()
    # a course-made CUDA run: the library it stands in for is PyTorch's (provenance.py words whose run it is)
    assert "cudaMemGetInfo" in text and "not a run of PyTorch" in text and "like a GPU with" in text
    assert not [word for word in ("aclrt", "torch_npu", "NPU") if word in text]


def test_the_chinese_npu_report_names_the_npu_and_has_no_english_sentence(npu_reports):
    from test_doctor_language import CJK, english_sentences, visible_html
    english, chinese = npu_reports
    text, page = chinese.text(), chinese.html()
    assert CJK.search(text) and english_sentences(text) == [] and english_sentences(visible_html(page)) == []
    for name in ("aclrtGetMemInfo", "aclrtMapMem/aclrtUnmapMem", "torch_npu 的地址", "一块 NPU", "先加 32 B 填充"):
        assert name in text, name
    assert not [word for word in CUDA_ONLY if word in text]
    assert (chinese.verdict.kind, chinese.verdict.line) == (english.verdict.kind, english.verdict.line)
