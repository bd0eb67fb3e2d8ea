"""The claim checks of chapters/00_setup_and_tour.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% ch0_context
course.claim("ch0_context", course.result_words(total - free == dev.info.context_reserve, "the context", course.fmt(total - free)))

# %% ch0_block
course.claim("ch0_block", course.fmt(x.size))
course.claim("ch0_reserved", course.fmt(a.memory_reserved()))
