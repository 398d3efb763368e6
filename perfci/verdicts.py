"""The one verdict enum: every verdict a benchmark can get, from the statistics or the gate."""

from __future__ import annotations

import enum


class Verdict(str, enum.Enum):
    SAME = "SAME"
    SLOWER = "SLOWER"  # timing: slower beyond the threshold, significantly (fails on device time)
    FASTER = "FASTER"
    NOISY = "NOISY"  # timing: the data cannot resolve the threshold
    NEW = "NEW"  # not in the baseline
    MISSING = "MISSING"  # in the baseline, intended to run, not run
    STRUCTURE = "STRUCTURE"  # a structural rule failed (fails)
    UNCOMPARED = "UNCOMPARED"  # measured, no baseline given
    ERROR = "ERROR"  # the benchmark raised (fails)
    INVALID = "INVALID"  # unusable times, or an unusable baseline entry (fails)

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> Verdict:
        """A verdict from its name in any case (older files wrote lower case)."""
        return cls(str(text).upper())


# worst first: the order of every table and report
ORDER = (Verdict.ERROR, Verdict.INVALID, Verdict.STRUCTURE, Verdict.SLOWER, Verdict.NOISY, Verdict.MISSING,
         Verdict.NEW, Verdict.UNCOMPARED, Verdict.FASTER, Verdict.SAME)
RANK = {v: i for i, v in enumerate(ORDER)}
