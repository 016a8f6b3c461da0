"""Plans made where the core's events keep flowing (issue 39, item 3).

A policy may take a while on a node of many jobs (`lookahead` predicts every candidate's
finishes), and for that long a daemon that planned on its event loop answered no REST call
and read no heartbeat. So the core does not call the policy: it asks for a plan
(`PlanNeeded`, with all the plan is made of) and goes on taking events; its adapter makes
the plan (`work_out`, a pure function: the daemon off its event loop, daemon/planner.py; the
simulator at once) and hands it back (`PlanMade`). One plan is in flight at a time, and
while it is no round starts or ends (`Core.planning`). One not made within
`plan_timeout_s` is given up (`PlanAbandoned`) and asked for again.

What a plan was made on may change while it is made: a job ends, a starting job begins to
run, an agent re-attaches. A planned job that ended or moved meanwhile is left out of the
round (the round its change brings plans what it freed), and the plan is used for the
others: on a busy node something changes during every long plan, and a plan thrown away
at each change would starve the jobs waiting for it. Only where the jobs it does not plan
hold more of the node than when it was asked for (an agent re-attached) does it no longer
fit: the core then asks again, on what is there now (`still_planned`). What jobs learned
meanwhile does not count: a plan made on a heartbeat-old curve is still a plan for them.
"""

from dataclasses import replace

from allocator import AllocationPlan, AllocationRequest, JobSpec, NodeSpec, allocate
from scheduler import learning
from scheduler.commands import (
    Allocation,
    Command,
    PlanAbandoned,
    PlanNeeded,
    PlanOutcome,
    PlanWork,
)
from scheduler.core import Core
from scheduler.curves import JobCurve
from scheduler.events import PlanMade
from scheduler.guard import plan_surviving
from scheduler.jobs import (
    Job,
    PendingPlan,
    PlanBasis,
    PlanPurpose,
    holding,
    planned_spec,
    share_of,
    workers_of,
)
from scheduler.states import JobState


def ask(
    core: Core,
    purpose: PlanPurpose,
    jobs: list[Job],
    node: NodeSpec,
    out: list[Command],
    *,
    now: float,
    arriving: tuple[str, ...] = (),
    round_gen: int | None = None,
) -> None:
    """Ask for the configured policy's plan for `jobs` on `node`: each job's work left and
    what it must keep, the fairness floor, and the completion window its fluid model waits.
    `arriving`: the arrivals it takes; `round_gen`: the round it serves (REPLAN)."""
    assert core.planning is None, "one plan in flight at a time"
    request = AllocationRequest(
        node=node,
        jobs=tuple(_policy_spec(core, job) for job in jobs),
        fair_floor=core.config.fair_floor,
        regrow_delay_s=core.config.completion_window_s,
    )
    # A job whose learned curve the policy cannot plan goes back to its prior
    # (scheduler/guard.py): each job's prior, where it plans on another curve now.
    priors = tuple(job.prior if job.spec != job.prior else None for job in jobs)
    core.plan_tickets += 1
    core.planning = PendingPlan(
        core.plan_tickets,
        purpose,
        tuple(job.request.id for job in jobs),
        basis(core, jobs),
        now,
        arriving,
        round_gen,
    )
    out.append(PlanNeeded(core.plan_tickets, PlanWork(request, core.config.policy, priors)))


def deadline(core: Core) -> float | None:
    """When the plan in flight is given up (`abandon_late`); None while none is."""
    pending = core.planning
    return None if pending is None else pending.asked_at + core.config.plan_timeout_s


def abandon_late(core: Core, now: float, out: list[Command]) -> PendingPlan | None:
    """Give up the plan in flight if it is past its deadline: the core no longer waits for
    it (its answer, should it still come, answers nothing) and says so; the plan given up,
    for its purpose to be asked for again."""
    due = deadline(core)
    pending = core.planning
    if due is None or pending is None or now < due:
        return None
    core.planning = None
    out.append(PlanAbandoned(pending.ticket, len(pending.jobs), now - pending.asked_at))
    return pending


def work_out(work: PlanWork) -> PlanOutcome:
    """The plan `work` asks for, as the core would have made it itself: pure, so that it
    may run anywhere; what the policy raises comes back in the outcome."""
    try:
        plan, refused = plan_surviving(
            lambda specs: allocate(replace(work.request, jobs=tuple(specs)), work.policy),
            work.request.jobs,
            work.priors,
        )
    except Exception as error:  # the core raises it where it takes the outcome
        return PlanOutcome(None, error=error)
    return PlanOutcome(plan, tuple(refused))


def answered(core: Core, event: PlanMade, out: list[Command]) -> PendingPlan | None:
    """The plan in flight that `event` answers, now no longer in flight, with the learned
    curves its policy refused put back on their priors (they learn again from their next
    heartbeats); None for an answer to no plan in flight (one asked before a restart)."""
    pending = core.planning
    if pending is None or pending.ticket != event.ticket:
        return None
    core.planning = None
    for refusal in event.outcome.refused:
        job = core.jobs[refusal.job_id]
        job.curve, job.spec = JobCurve(), job.prior
    out.extend(event.outcome.refused)
    return pending


def made(outcome: PlanOutcome) -> AllocationPlan:
    """The outcome's plan; what the policy raised where it made none."""
    if outcome.plan is None:
        assert outcome.error is not None
        raise outcome.error
    return outcome.plan


def basis(core: Core, jobs: list[Job]) -> PlanBasis:
    """What a plan of `jobs` is made on (`PendingPlan.basis`)."""
    planned = tuple((job.request.id, job.state, holding(job)) for job in jobs)
    return (planned, *_held_outside(core, {job.request.id for job in jobs}))


def still_planned(core: Core, pending: PendingPlan) -> list[Job] | None:
    """The jobs the plan still holds for, in its order: those in the state and with the
    allocation it was made on. A job that ended or moved meanwhile (finished, cancelled,
    lost, sent back for a relaunch) is left out: the round its change brings plans what it
    freed. None where the plan no longer fits: the jobs it does not plan (those left out
    among them) hold more of the node than when it was asked for (one re-attached)."""
    then = {job_id: (state, held) for job_id, state, held in pending.basis[0]}
    kept = [
        core.jobs[job_id]
        for job_id in pending.jobs
        if (core.jobs[job_id].state, holding(core.jobs[job_id])) == then[job_id]
    ]
    processes, shares = _held_outside(core, {job.request.id for job in kept})
    if processes > pending.basis[1] or shares > pending.basis[2] + 1e-9:
        return None
    return kept


def _held_outside(core: Core, planned: set[str]) -> tuple[int, float]:
    """The loader processes and decoder share of the jobs holding resources that are not
    in `planned`."""
    outside = [
        job
        for job in core.live.values()
        if job.state.holds_resources and job.request.id not in planned
    ]
    processes = sum(job.request.gpus * workers_of(holding(job)) for job in outside)
    return processes, sum(share_of(holding(job)) for job in outside)


def node_left(core: Core, also_fixed: tuple[JobState, ...] = ()) -> NodeSpec:
    """The node less the processes of jobs no plan can change now: those starting or
    resuming with an allocation already sent (and jobs in `also_fixed` states)."""
    fixed = [
        job
        for job in core.live.values()
        if job.state in (JobState.STARTING, JobState.RESUMING, *also_fixed)
        or (job.fixed and job.state.holds_resources)
    ]
    held = sum(job.spec.gpus * workers_of(holding(job)) for job in fixed)
    shares = sum(share_of(holding(job)) for job in fixed)
    if not held:
        return core.node
    return replace(
        core.node,
        cpu_workers=max(1, core.node.cpu_workers - held),
        decoder_capacity=core.node.decoder_capacity * max(0.0, 1.0 - shares),
    )


def _kept_allocation(core: Core, job: Job) -> Allocation | None:
    """The allocation a policy must keep: a running job's own, and under `static` a new
    job's requested workers."""
    if job.state is JobState.RUNNING:
        return job.allocation
    requested = job.request.workers_per_gpu
    if core.config.policy == "static" and requested is not None:
        return Allocation(requested)
    return None


def _policy_spec(core: Core, job: Job) -> JobSpec:
    return planned_spec(job, _kept_allocation(core, job), learning.pause_cost_s(core, job))
