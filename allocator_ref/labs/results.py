"""What ``check()`` returns: one ``CaseResult`` per case, gathered in a ``CheckResult``.

Its own file because two judges build them: ``check.py`` in the notebook's process and
``apart.py`` from a graded check's clean process.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CaseResult:
    label: str
    hidden: bool
    passed: bool
    explanation: str = ""
    output: str = ""                     # what the learner's code printed during the case (capped)
    stub: bool = False                   # failed only because the stub is still there
    stopped: bool = False                # hit the time limit or was interrupted: later cases did not run


@dataclass
class CheckResult:
    exercise: str
    seed: int
    cases: list = field(default_factory=list)
    explanation: str = ""                # of the first failure ("" when all pass)
    hint: str = ""                       # what the report gave: "" (stub or pass), the nudge, or nudge + recipe

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def failures(self) -> list:
        return [c for c in self.cases if not c.passed]

    @property
    def untouched(self) -> bool:
        """Every failure is the stub's NotImplementedError: nothing written yet."""
        return bool(self.failures) and all(c.stub for c in self.failures)

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        n = sum(c.passed for c in self.cases)
        return f"<CheckResult {self.exercise}: {'PASS' if self.passed else 'FAIL'} ({n}/{len(self.cases)} cases)>"
