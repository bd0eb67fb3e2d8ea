"""Find English sentences in text a Chinese reader is shown (the tests' one detector).

Code, API names, settings lines, paths and numbers are allowed in a Chinese line; an English *sentence*
is not.  A sentence here is four or more plain English words in a row (lower-case letters, maybe one
capital first: "the allocator may use", "Large pool requests"), outside backticks, quotes and paths.
Identifiers (``memory_reserved()``, ``expandable_segments:True``, ``cs336-gpt.pickle``) are not words:
they have an underscore, a dot, a colon, a slash or a digit.
"""
from __future__ import annotations

import re

# A stack frame's function name is code too: "models.py:231，函数 forward", "cell.py:27 recording".
_CODE = re.compile(r"\S*\.py:\d+\S*\s+[A-Za-z_]\w*|`[^`]*`|'[^']*'|\"[^\"]*\"|<[^>]*>|\S*[/\\]\S*")
_WORD = re.compile(r"^[A-Za-z][a-z]+(?:'[a-z]+)?[,;:.!?)]?$")
_NAMES = {"PyTorch", "GPU", "CUDA", "Triton"}     # names that may stand in a Chinese sentence as they are


def english_sentences(text: str, min_words: int = 4) -> list:
    """Every run of ``min_words`` or more English words in ``text`` (one string per run)."""
    found = []
    for line in text.splitlines():
        run = []
        for token in _CODE.sub(" \0 ", line).split():
            if _WORD.match(token) and token.strip(",;:.!?)") not in _NAMES:
                run.append(token)
                continue
            if len(run) >= min_words:
                found.append(" ".join(run))
            run = []
        if len(run) >= min_words:
            found.append(" ".join(run))
    return found


# Words a Chinese line may hold as they are: units, Python's literals, PyTorch's names (``_NAMES``), and
# "eager" and "rank", which Chinese engineers write in English (eager 模式, 每个 rank; the tools' catalogue
# says rank throughout).
_KEPT = {"bytes", "us", "ms", "True", "False", "None", "eager", "rank"}
_LABEL = re.compile(r"^\(?([A-Za-z][a-z]+(?:'[a-z]+)?)[,;:.!?)]*$")


def english_labels(text: str) -> list:
    """Every English word of ``text`` outside code, quotes and paths, apart from units and literals: the
    short labels (a column heading "peak reserved", a row's "ok") that :func:`english_sentences`, which
    looks for four words in a row, lets through."""
    found = []
    for line in text.splitlines():
        for token in _CODE.sub(" \0 ", line).split():
            word = _LABEL.match(token)
            if word and word.group(1) not in _KEPT and word.group(1) not in _NAMES:
                found.append(word.group(1))
    return found
