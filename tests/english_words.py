"""Find English sentences in text a Chinese reader is shown (the tests' one detector).

Code, API names, settings lines, paths and numbers are allowed in a Chinese line; an English *sentence*
is not.  A sentence here is four or more plain English words in a row (lower-case letters, maybe one
capital first: "the allocator may use", "Large pool requests"), outside backticks, quotes and paths.
Identifiers (``memory_reserved()``, ``expandable_segments:True``, ``cs336-gpt.pickle``) are not words:
they have an underscore, a dot, a colon, a slash or a digit.
"""
from __future__ import annotations

import re

_CODE = re.compile(r"`[^`]*`|'[^']*'|\"[^\"]*\"|<[^>]*>|\S*[/\\]\S*")
_WORD = re.compile(r"^[A-Za-z][a-z]+(?:'[a-z]+)?[,;:.!?)]?$")
_NAMES = {"PyTorch", "GPU", "CUDA"}     # names that may stand in a Chinese sentence as they are


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
