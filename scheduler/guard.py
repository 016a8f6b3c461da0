"""A planning round that survives any one job's numbers (issue 37, finding 1).

A job's learned curve comes from what its process reports, and a process may report
anything. Its curve is held to what a job can physically do (scheduler/curves.py), but
should a policy still fail on it, or predict a figure that is not a finite number, the
round is not lost for every job on the node: the jobs whose learned curves break it are
planned on their priors, and said to be (`CurveRefused`), and the others as they learned.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from allocator import AllocationPlan, JobSpec
from scheduler.commands import CurveRefused

# What a policy raises on numbers it cannot plan: its own refusals (InvalidRequest is a
# ValueError), a math domain error, an overflow, a division by zero; and NumPy's overflow
# where warnings are errors (`python -W error`, the test suite).
_FAILURES = (ArithmeticError, ValueError, RuntimeWarning)


def plan_surviving(
    plan: Callable[[Sequence[JobSpec]], AllocationPlan],
    learned: Sequence[JobSpec],
    priors: Sequence[JobSpec | None],
) -> tuple[AllocationPlan, list[CurveRefused]]:
    """`plan` of the jobs as they `learned`; where that fails, of the same jobs with the
    first learned curve whose prior in its place lets it plan (tried one job at a time, in
    order), else with every learned curve put back on its prior. `priors`: each job's
    prior, or None where it plans on its prior already. Returns the plan and the jobs put
    back. What fails on the priors alone is no job's numbers: raised as it was."""
    try:
        return _checked(plan(learned)), []
    except _FAILURES as error:
        failure = error
    moved = {
        index: _as_planned(prior, learned[index])
        for index, prior in enumerate(priors)
        if prior is not None
    }
    raised, said = type(failure).__name__, str(failure)
    for index, prior in moved.items():
        specs = list(learned)
        specs[index] = prior
        try:
            found = _checked(plan(specs))
        except _FAILURES:
            continue
        return found, [CurveRefused(learned[index].id, raised, said)]
    try:
        if not moved:
            raise failure
        found = _checked(plan([moved.get(i, spec) for i, spec in enumerate(learned)]))
    except _FAILURES:
        if isinstance(failure, _NotFinite):  # no job's doing: the plan as it was made
            return failure.plan, []
        raise failure from None
    return found, [CurveRefused(learned[index].id, raised, said) for index in moved]


def _as_planned(prior: JobSpec, planned: JobSpec) -> JobSpec:
    """`prior` with what a round adds to a job's spec: its work left, the workers it must
    keep and its pause's cost."""
    return replace(
        prior,
        remaining_samples=planned.remaining_samples,
        current_workers_per_gpu=planned.current_workers_per_gpu,
        pause_cost_s=planned.pause_cost_s,
    )


class _NotFinite(ValueError):
    def __init__(self, plan: AllocationPlan) -> None:
        super().__init__("the plan predicts a rate that is not a finite number")
        self.plan = plan


def _checked(plan: AllocationPlan) -> AllocationPlan:
    """`plan`, if every rate it predicts is a finite number; else _NotFinite."""
    figures = [plan.predicted_total_samples_per_s]
    figures += [allocation.predicted_samples_per_s for allocation in plan.allocations.values()]
    if not all(math.isfinite(figure) for figure in figures):
        raise _NotFinite(plan)
    return plan
