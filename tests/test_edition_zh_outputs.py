"""A Chinese chapter run as a learner runs it: what it prints holds no English sentence, apart from code,
settings lines, API names, paths and PyTorch's own texts (its OOM message and errors, quoted as PyTorch
writes them); and its prose holds no English phrase in bold where a claim stands.

Chapters whose printed lines all go through the course's helpers are listed in CLEAN; a chapter joins
the list when its cells print through ``course.say``/``course.words`` (chapters/_course.py)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

from allocator_ref.policies.registry import policy_names

sys.path.insert(0, str(Path(__file__).parent))
from english_words import english_labels, english_sentences   # noqa: E402
from test_notebooks import execute_notebook, outputs_text     # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLEAN = ["00_setup_and_tour.ipynb", "01_what_cudamalloc_costs.ipynb", "02_caching_allocator.ipynb",
         "03_streams.ipynb", "04_oom_and_fragmentation.ipynb", "05_vmm_and_expandable_segments.ipynb",
         "06_zero_copy_and_ipc.ipynb", "07_diagnostics.ipynb", "08_pools_you_own.ipynb", "09_casebook.ipynb"]
# PyTorch's and CUDA's own words, shown as they say them; each runs to the end of its line:
# c10/cuda/CUDACachingAllocator.cpp's OOM message (malloc, the "Tried to allocate" report and its
# "Including non-PyTorch memory" / "allowed;" / "If reserved but unallocated" lines; chapter 4 also quotes
# its "Tried to allocate" report without the "CUDA out of memory." head), its
# "Allocator backend parsed at runtime" check (CUDAAllocatorConfig.cpp), and cudaGetErrorString's text.
PYTORCH_TEXTS = ("Allocator backend parsed at runtime != allocator backend parsed at load time",
                 "CUDA out of memory. Tried to allocate", "Tried to allocate", "Including non-PyTorch memory",
                 "allowed; Of the allocated memory", "If reserved but unallocated memory is large",
                 "cudaErrorMemoryAllocation", "See documentation for Memory Management",
                 # the same message printed a sentence a line (chapter 8): its head and its capacity line
                 "CUDA out of memory.", "has a total capacity of",
                 # torch/cuda/_memory_viz.py's segsum ``legend``, which chapter 7 shows when torch is installed
                 # (``python -m torch.cuda._memory_viz stats``): each legend line as PyTorch writes it.
                 "[a     ] - a segment in the allocator", "^-- a page", "' ': page is completely free",
                 "*: page if completely full with multiple blocks", "0-9: page is partially full with tensors",
                 "(X% internal) - of the free memory",
                 # and segsum's own lines above its legend (the same file: "Summary of segments >= ...",
                 # "[body] <size> allocated, <size> free", "segments: N", "total_free: ..."), and its "Legend:"
                 "Summary of segments >=", "B allocated, ", "segments: ", "total_reserved: ", "total_allocated: ",
                 "total_free: ", "Legend:", "a-z: pages filled with a single block's content")
POLICY_NAMES = policy_names()


def english_lines(text: str, labels: bool = True) -> list:
    """The lines of ``text`` holding an English sentence of ours (and, with ``labels``, a short English label)."""
    lines = []
    for line in text.splitlines():
        for quoted in PYTORCH_TEXTS:
            if quoted in line:
                line = line[:line.index(quoted)]
        if line.lstrip().startswith("|") and line.rstrip().endswith("|"):
            continue              # memory_summary()'s table: PyTorch's own text (torch.cuda.memory_summary)
        # a registered policy's name (``--policy caching``) is code, as ``stream_ordered`` is
        named = re.sub(rf"(?<![\w-])({'|'.join(POLICY_NAMES)})(?![\w-])", " ", line)
        if english_sentences(line) or (labels and english_labels(named)):
            lines.append(line)
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("name", CLEAN)
def test_a_chinese_chapter_prints_no_english_sentence(name):
    run, _ = execute_notebook(ROOT / "chapters" / "zh" / name)
    text = outputs_text(run)
    assert re.search(r"[\u4e00-\u9fff]", text)
    bad = english_lines(text)
    assert not bad, f"zh/{name} printed English: " + " | ".join(bad[:10])


def test_the_scan_finds_an_english_line_and_spares_pytorchs_own():
    assert english_lines("the engine's wake ran out of memory")
    assert not english_lines("OOM 之后，仍处于已分配状态：0 bytes [在 sim-h100-80gb 上模拟]")
    assert not english_lines("2.11   : Tried to allocate 2.00 MiB. ... of which 0 bytes is free.")
    assert english_lines("receiver: process 17825 freed the shared block (or unshared it): its memory may already "
                         "hold another tensor.")     # what zh/06 printed before the sharing errors were translated
    assert not english_lines("运行时设置 backend：Allocator backend parsed at runtime != allocator backend parsed "
                             "at load time")


def test_the_scan_finds_short_english_labels_and_spares_units_and_literals():
    """Labels of one to three words slip past the four-word sentence rule; what chapter 5 printed before."""
    for label_line in ("default                       128.00 MiB  256.00 MiB            12              12",
                       "缓存分配器，expandable_segments:True          ok  660.00 MiB  558.00 MiB",
                       "torch_npu on Ascend  块大小 [1024, 4608]",
                       "设备    ：sim-h100-80gb (simulated)",
                       "CachingAllocator (per-stream cache)      8.16 ms  peak reserved  128.00 MiB  cudaMalloc  2"):
        assert english_lines(label_line) and not english_lines(label_line, labels=False), label_line
    assert not english_lines("默认                    第 0 步：  5 次驱动调用，模拟耗时     178.3 us")
    assert not english_lines("分配器：预留 0 bytes，已分配 512 bytes；expandable_segments:True -> True")
    assert not english_lines("caching         （默认）                   预留峰值   2.00 GiB")
    assert not english_lines("|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |")
    # a stack frame's function name is code; rank is the word Chinese engineers (and the tools) write
    assert not english_lines("  4.9 GiB（流 0）：models.py:231，函数 forward <- threading.py:982，函数 run")
    assert not english_lines("        16.0 MiB  2013583039.py:17 mlp_step < 2013583039.py:27 recording")
    assert not english_lines("适用于每个 rank 的统一设置")
    assert english_lines("  4.9 GiB（流 0）：models.py:231 forward pass here")
    for segsum_line in ("Summary of segments >= 20.0MiB in size", "[6] 20.0MiB allocated, 8.0MiB (0.0% internal) free",
                        "segments: 4", "total_free: 10.0MiB (0.0% internal)", "Legend:"):   # _memory_viz.segsum's
        assert not english_lines(segsum_line), segsum_line


@pytest.mark.parametrize("path", sorted((ROOT / "chapters" / "zh").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_no_claimed_value_is_an_english_phrase_in_chinese_prose(path):
    """A claim's bold value in a Chinese sentence is a number, a name, code, PyTorch's text, or Chinese
    (the values the built notebook's markdown cells claim, in their ``claims`` metadata)."""
    found = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        for value in cell.metadata.get("claims", {}).values():
            words = re.sub(r"`[^`]*`", " ", value)
            if any(t in value for t in PYTORCH_TEXTS) or re.search(r"[\u4e00-\u9fff]", words):
                continue
            if len(re.findall(r"\b[a-z]{2,}\b", words)) >= 1 and not re.fullmatch(r"[\w.:=\[\], ()%-]*\d[\w.:=\[\], ()%-]*", words):
                found.append(value)
    assert not found, f"zh/{path.name}: English phrases claimed inside Chinese sentences: {found}"
