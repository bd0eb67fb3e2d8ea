"""An exercise in one declaration: inputs, the reference, what to say.

Most exercises on a single decision have the same shape: call the learner's function on some
inputs, compare with the reference by exact type and value, explain a difference.  ``function_exercise``
builds the cases, the seeded hidden generator and the registration from one declaration::

    function_exercise(
        id="lab9.double", lab=9, title="double(n)",
        reference=lambda n: 2 * n,
        public=[(3,), (0,)],                                  # argument tuples, shown when they fail
        hidden=lambda rng: [(rng.randint(10, 10**6),) for _ in range(5)],   # drawn from the seed
        explain=lambda args, expected: f"twice {args[0]} is {expected}",    # why, for a public case
        nudge="Look at the number above.", hint="Return n * 2.")

Each public input is its own case, labelled with the call (or ``label(args)``); the hidden inputs form
one case per draw, labelled ``hidden_label`` (or the label of a :class:`Drawn` input) and never showing
the expected value.  When the learner's function takes objects built from the inputs (a Block from its
size), ``call(args)`` builds them afresh for each call; ``returns=(type, words)`` asks for an exact type
first; ``message(args, got, expected)`` words a difference.  Cases of another shape (a workload with the
function plugged in) come after the drawn ones: ``more_public``, ``more_hidden(rng)`` (same generator,
after ``hidden``).  For decisions inside the allocator, judge with
``workload.compare(ops, None, plug={"name": fn})`` (see plug.py).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..editions.messages import translator
from .check import Case, Exercise, Fail, register, same, shown, show

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)


def _call_text(name: str, args: tuple) -> str:
    return f"{name}({', '.join(show(a, 60) for a in args)})"


@dataclass(frozen=True)
class Drawn:
    """A hidden input with its own label (the kind of case it is)."""
    args: tuple
    label: str


def value_case(name: str, reference: Callable, args: tuple, explain: Optional[Callable] = None,
               label: Optional[str] = None, *, call: Optional[Callable] = None,
               returns: Optional[tuple] = None, message: Optional[Callable] = None) -> Case:
    """One call of the learner's function, judged against ``reference(*args)`` by exact type and value.

    ``call(args)``: the arguments the learner's function gets (default ``args``), built afresh;
    ``returns=(type, words)``: the exact type asked for ("True or False"), checked first;
    ``message(args, got, expected) -> (text, safe)``: the explanation of a difference."""
    def judge(fn):
        expected = reference(*args)
        got = fn(*(call(args) if call else args))
        if returns is not None and type(got) is not returns[0]:
            raise Fail(tr("{name} returned {got}, a {kind}: return {wanted}", name=name, got=show(got),
                          kind=type(got).__name__, wanted=shown(returns[1])),
                       tr("your {name} did not return {wanted}", name=name, wanted=shown(returns[1])))
        if not same(got, expected):
            if message is not None:
                raise Fail(*message(args, got, expected))
            why = tr(": {why}", why=explain(args, expected)) if explain else ""
            kind = "" if type(got) is type(expected) else tr(" ({got} instead of {expected})",
                                                              got=type(got).__name__, expected=type(expected).__name__)
            raise Fail(tr("{call} returned {got}{kind}; expected {expected}{why}", call=_call_text(name, args),
                          got=show(got), kind=kind, expected=show(expected), why=why),
                       tr("your {name} differs from the reference on an input of this kind{kind}", name=name,
                          kind=kind))
    return Case(label or _call_text(name, args), judge, data=args)


def function_exercise(*, id: str, lab: int, title: str, reference: Callable, public: Sequence[tuple],
                      hidden: Callable[[random.Random], Sequence[Any]], nudge: str, hint: str,
                      explain: Optional[Callable] = None, hidden_label: str = later("a seeded input"),
                      name: Optional[str] = None, label: Optional[Callable] = None,
                      call: Optional[Callable] = None, returns: Optional[tuple] = None,
                      message: Optional[Callable] = None, more_public: Callable[[], Sequence[Case]] = list,
                      more_hidden: Optional[Callable[[random.Random], Sequence[Case]]] = None,
                      pure: bool = False) -> Exercise:
    """Register an exercise on a plain function from one declaration (see the module docstring).
    ``pure=True``: the judge reads only what the function returns (a graded check calls it from a clean
    process: apart.py)."""
    name = name or id.split(".", 1)[1]
    how = dict(call=call, returns=returns, message=message)

    def public_cases():
        return [value_case(name, reference, tuple(args), explain, label(tuple(args)) if label else None, **how)
                for args in public] + list(more_public())

    def hidden_cases(rng):
        cases = []
        for drawn in hidden(rng):
            args, text = (drawn.args, drawn.label) if isinstance(drawn, Drawn) else (drawn, hidden_label)
            cases.append(value_case(name, reference, tuple(args), explain, shown(text), **how))
        return cases + (list(more_hidden(rng)) if more_hidden else [])

    return register(Exercise(id=id, lab=lab, title=title, public=public_cases, hidden=hidden_cases,
                             nudge=nudge, hint=hint, pure=pure))




# ------------------------------------------------------------------ the rule's edges and states
# A rule is only tested where its answer changes: at each boundary (``<`` against ``<=``) and in each
# state it tells apart (a neighbour pending on an event, a block in a later segment).  An exercise
# lists them once, here, and ``make check-labs`` (verify.py) proves that the hidden cases of every
# seed meet each one, so a learner who tunes an answer until the public cases pass still meets them.

@dataclass(frozen=True)
class Edge:
    """One boundary or state of an exercise's rule; ``met(data)`` reads one hidden case's ``Case.data``."""
    name: str                              # in words, as a learner would say it
    met: Callable[[Any], bool]


EDGES: dict = {}                           # exercise id -> tuple of Edge


def edges(exercise_id: str, *listed: Edge) -> None:
    """Declare the edges and states of ``exercise_id``'s rule (verify.py checks every seed meets them)."""
    EDGES[exercise_id] = tuple(listed)


def uncovered(ex, seed: int) -> list:
    """The names of ``ex``'s edges that no hidden case of ``seed`` meets (all hidden cases, not quick mode)."""
    cases = list(ex.hidden(random.Random(f"{ex.id}:{seed}")))
    return [edge.name for edge in EDGES.get(ex.id, ()) if not any(edge.met(c.data) for c in cases)]


def seen_in_run(ops: list, config: str, hook: str, classify: Callable, profile: str = "h100-80gb") -> set:
    """The states ``classify(device_allocator, *args)`` names for every call of the reference
    DeviceCachingAllocator member ``hook`` while ``ops`` run: which branches of the rule a workload
    really reaches (not what its ops suggest)."""
    from .reference import CachingAllocator
    from .workload import run

    seen: set = set()

    def spy_factory(dev):
        alloc = CachingAllocator(dev, config)
        da = alloc.device_allocator
        original = getattr(da, hook)

        def spy(*args):
            seen.update(classify(da, *args))
            return original(*args)
        setattr(da, hook, spy)
        return alloc
    run(ops, spy_factory, profile)
    return seen


__all__ = ["function_exercise", "value_case", "Drawn", "Edge", "edges", "uncovered", "seen_in_run", "EDGES"]
