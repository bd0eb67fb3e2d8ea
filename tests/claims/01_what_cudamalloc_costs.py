"""The claim checks of chapters/01_what_cudamalloc_costs.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% q1_growth
course.claim("q1_growth", course.fmt(free0 - free1))
course.claim("q1_left", course.result_words(free2 == free0, "the whole context", course.fmt(total - free2)))

# %% malloc_2mib_us
course.claim("malloc_2mib_us", f"{lat[2][0]:.0f} us")
course.claim("free_1gib_ms", f"{lat[5][1] / 1000:.1f} ms")

# %% free_behind_kernel_ms
course.claim("free_behind_kernel_ms", f"{(t2 - t1) / 1000:.2f} ms")

# %% q2_slowdown
course.claim("q2_slowdown", f"{slow:.1f}x")
course.claim("q2_direct_calls", str(direct[0]["malloc"] + direct[0]["free"]))
course.claim("q2_cached_first", str(cached[0]["malloc"]))
course.claim("q2_cached_repeat", str(steady_calls))
course.claim("q2_cold_ms", f"{cached[0]['ms']:.2f} ms")
course.claim("q2_later_ms", f"{max(later):.2f} ms" if f"{min(later):.2f}" == f"{max(later):.2f}"
             else f"{min(later):.2f} to {max(later):.2f} ms")
