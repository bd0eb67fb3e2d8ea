"""Hands-on labs: ``check()`` your code against the reference allocator.

    from allocator_ref.labs import check, hint, show_solution, progress
    check("lab2.should_split", should_split)     # prints per-case results, returns .passed
    hint("lab2.should_split")                    # a nudge
    show_solution("lab2.should_split")           # only when you ask
    progress()                                   # "lab 2: 3/4 exercises passing"

check.py is the framework (guard.py runs a case safely, reference.py keeps
private copies of the reference, plug.py plugs a learner's function into any
decision); lab1.py ... lab8.py hold each lab's public cases,
seeded hidden-case generators and hints; generate.py builds the student
notebooks from the instructor sources (``make student``).  See labs/README.md.
"""
from . import reference  # noqa: F401 -- freeze the reference allocator now, before any learner code runs
from .check import CheckResult, check, hint, progress, show_solution

__all__ = ["check", "hint", "show_solution", "progress", "CheckResult"]
