"""The claim checks of chapters/02_caching_allocator.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% q5_tiny_block
# Every claim below is read from the allocator the map above draws, not recomputed from the rules.
course.claim("q5_tiny_block", course.fmt(tiny.size))
course.claim("q5_five_segment", course.fmt(course.segment_of(t, five)["total_size"]))
shares = course.segment_of(t, twelve)["address"] == course.segment_of(t, five)["address"]
course.claim("q5_twelve_where", course.result_words(shares, "the 5 MiB tensor's segment", "a segment of its own"))
course.claim("q5_reserved", course.fmt(t.memory_reserved()))

# %% q5_segments
course.claim("q5_segments", str(s["segment.all.current"]))

# %% q5_oom_allocated
course.claim("q5_oom_allocated", course.fmt(b.memory_allocated()))
course.claim("q5_oom_reserved", course.fmt(b.memory_reserved()))
course.claim("q5_oom_tried", re.search(r"Tried to allocate (.+?)\. GPU", message).group(1))
course.claim("q5_oom_capacity", re.search(r"total capacity of (\S+ \S+?) of which", message).group(1))

# %% split_19_5_block
course.claim("split_19_5_block", course.fmt(big.size))

# %% q3_reserved_after_free
course.claim("q3_reserved_after_free", course.fmt(reserved_after_free))

# %% q4_allocated
course.claim("q4_allocated", course.fmt(s["allocated_bytes.all.current"]))
course.claim("q4_reserved", course.fmt(s["reserved_bytes.all.current"]))
course.claim("q4_nonreleasable", course.fmt(s["inactive_split_bytes.all.current"]))
course.claim("q4_device_free", str(s["num_device_free"]))

# %% q6_small_first
course.claim("q6_small_first", course.fmt(r16))
course.claim("q6_large_first", course.fmt(r32))

# %% q7_calls_cached
course.claim("q7_calls_cached", str(results[False]["malloc"] + results[False]["free"]))
course.claim("q7_calls_empty", str(results[True]["malloc"] + results[True]["free"]))
course.claim("q7_slowdown", f"{results[True]['time_ms'] / results[False]['time_ms']:.1f}x")
