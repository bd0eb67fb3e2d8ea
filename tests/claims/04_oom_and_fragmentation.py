"""The claim checks of chapters/04_oom_and_fragmentation.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% q12_ladder
course.claim("q12_ladder", course.result_words(not found and s["num_ooms"] == 1,
                                               "No rung found the memory", "A rung found the memory"))
course.claim("q12_flush", course.result_words(
    ("release_cached_blocks", True) in rungs and s["num_device_free"] == frees_before,
    "returns True but frees nothing", "freed something"))
course.claim("q12_retries", str(s["num_alloc_retries"]))

# %% q12_tried
course.claim("q12_tried", re.search(fields[0][0], oom).group(1))
course.claim("q12_free", re.search(fields[2][0], oom).group(1))
course.claim("q12_allocated", re.search(fields[4][0], oom).group(1))
course.claim("q12_unallocated", re.search(fields[5][0], oom).group(1))

# %% twenty_free
course.claim("twenty_free", re.search(r"of which (\S+ \S+?) is free", msg).group(1))
course.claim("twenty_unallocated", re.search(r"and (\S+ \S+?) is reserved", msg).group(1))

# %% q13_reserved
course.claim("q13_reserved", course.fmt(capped[0]))
course.claim("q13_retries", str(capped[1]))

# %% q13_4096_segments
course.claim("q13_4096_segments", str(len(segs)))
course.claim("q13_4096_split", str(sum(1 for seg in segs if len(seg["blocks"]) > 1)))
course.claim("q13_4096_early_frees", str(al.frees_before_request))
course.claim("q13_4096_retries", str(s["num_alloc_retries"]))
course.claim("q13_4096_flushed", str(s["num_device_free"] - al.frees_before_request))

# %% q14_asc_reserved
course.claim("q14_asc_reserved", course.fmt(asc["peak_reserved"]))
course.claim("q14_first_reserved", course.fmt(first["peak_reserved"]))
course.claim("q14_r4_reserved", course.fmt(r4["peak_reserved"]))
course.claim("q14_peak_alloc", course.fmt(asc["peak_alloc"]) if asc["peak_alloc"] == first["peak_alloc"] else "differs")
course.claim("q14_r4_peak_alloc", course.fmt(r4["peak_alloc"]))

# %% q15_default_retries
course.claim("q15_default_retries", str(results[""]["retries"]))
course.claim("q15_default_frees", str(results[""]["free"]))
course.claim("q15_gc_retries", str(results["garbage_collection_threshold:0.6"]["retries"]))
course.claim("q15_gc_noop", course.result_words(gc_alone == asc, "identical", "different"))
