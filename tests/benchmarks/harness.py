"""Paired timing: candidates take turns every round, the order rotates.

These machines are shared and noisy, so no single timing means anything. Each
round runs every candidate once, in an order rotated by one each round, and a
candidate's speed relative to a reference is the median of the per-round
ratios (a paired comparison: both saw the same moment of the machine).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Series:
    """All the timings of one candidate on one workload."""

    name: str
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def low(self) -> float:
        return min(self.seconds)

    @property
    def high(self) -> float:
        return max(self.seconds)


def paired(
    candidates: dict[str, Callable[[], object]],
    rounds: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Series]:
    """Time each candidate ``rounds`` times, rotating the order every round.

    The cyclic GC is collected before and disabled during each timed call, so
    one candidate's garbage is never billed to the next. ``clock`` is wall time
    by default; ``time.process_time`` measures CPU, for targets stated in CPU.
    """
    names = list(candidates)
    series = {name: Series(name) for name in names}
    for round_no in range(rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            gc.disable()
            try:
                start = clock()
                candidates[name]()
                series[name].seconds.append(clock() - start)
            finally:
                gc.enable()
    return series


def paired_ratio(series: dict[str, Series], name: str, reference: str) -> float:
    """Median over rounds of time(reference) / time(name): above 1 means faster."""
    ratios = [
        ref / own
        for own, ref in zip(series[name].seconds, series[reference].seconds, strict=True)
        if own > 0
    ]
    return statistics.median(ratios)
