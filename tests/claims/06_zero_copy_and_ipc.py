"""The claim checks of chapters/06_zero_copy_and_ipc.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% ch6_offset
course.claim("ch6_offset", course.fmt(h.offset))

# %% ch6_stale
course.claim("ch6_stale", f"0x{early[0]:02X}")
course.claim("ch6_fresh", f"0x{late[0]:02X}")

# %% ch6_pinned_asked
course.claim("ch6_pinned_asked", course.fmt(asked))
course.claim("ch6_pinned_held", course.fmt(held))
course.claim("ch6_pinned_wasted", course.fmt(held - asked))

# %% ch6_pinned_one_buffer
course.claim("ch6_pinned_one_buffer", course.fmt(whole.size))

# %% ch6_reserve_block
course.claim("ch6_reserve_block", course.fmt(block_size))
course.claim("ch6_reserve_blocks", stats["num_host_alloc"])
course.claim("ch6_reserve_calls", stats["host_alloc_time.count"])
