"""Rounds: when the arrival or completion window closes, plan every job with the configured
policy, pause the running jobs whose allocation changes (those the reallocation gate lets
through), and once they have all reported `paused`, or the pause timeout passed, launch the
new jobs and resume the paused ones. A round serves both buffers, whichever window closed;
only one runs at a time. Arrivals that fit beside the running jobs start at once, planned
on the leftover alone. Every plan has a generation number its commands carry. The plans
themselves are made outside the core (scheduler/planning.py): a round starts when its plan
comes (`plan_made`), if what it planned is still there."""

from dataclasses import replace
from typing import assert_never

from allocator import AllocationPlan, InvalidRequest, NodeSpec
from scheduler import learning, planning
from scheduler.commands import (
    Command,
    Gated,
    Launch,
    Pause,
    Planned,
    PlanOutcome,
    Replanned,
    SetShare,
)
from scheduler.core import Core
from scheduler.events import PlanMade
from scheduler.gate import RunningJob, decide
from scheduler.jobs import (
    Job,
    PendingPlan,
    PlanPurpose,
    Round,
    holding,
    needs_pause,
    plannable,
    planned_allocation,
    remaining_samples,
    share_of,
    workers_of,
)
from scheduler.reasons import StateReason
from scheduler.states import JobState

# Share changes smaller than this are noise of the plan, not worth a message.
_SHARE_STEP = 0.01


def maybe_start_round(core: Core, now: float, out: list[Command]) -> None:
    """Ask for a round's plan if a window closed (or start arrivals beside the running
    jobs); the round starts when the plan comes (`plan_made`)."""
    if core.round is not None or core.planning is not None:
        return
    early = core.arrivals_due is not None and now < core.arrivals_due
    if early and core.config.start_when_free:
        start_beside_running(core, now, out)
        if core.round is not None or core.planning is not None:
            return
    arrivals_due = core.arrivals_due is not None and now >= core.arrivals_due
    completions_due = core.completions_due is not None and now >= core.completions_due
    held = core.held_until is not None
    if not (arrivals_due or completions_due or held):
        return
    if not arrivals_due and _waits(core, now, held):
        return
    # A round serves both buffers, whichever window closed: an arrival left waiting would
    # only pause the same jobs again when its own window closes.
    arriving = tuple(core.arrivals)
    planned = _round_jobs(core, arriving)
    if not planned:
        _take_buffers(core, arriving, arriving, now, out)
        return
    learning.relearn_contention(core)
    node = planning.node_left(core)
    planning.ask(core, PlanPurpose.ROUND, planned, node, out, now=now, arriving=arriving)


def _round_jobs(core: Core, arriving: tuple[str, ...]) -> list[Job]:
    """The jobs a round plans: those it may change and the `arriving` ones, shortest
    remaining work first (the baselines and `waa` break ties in request order, so the jobs
    nearest completion get their leftovers; `optimal` weighs the work left itself)."""
    taking = set(arriving)
    return sorted(
        (
            job
            for job in core.live.values()
            if plannable(job) or (job.request.id in taking and not job.fixed)
        ),
        key=remaining_samples,
    )


def _take_buffers(
    core: Core,
    served: tuple[str, ...],
    taken: tuple[str, ...],
    now: float,
    out: list[Command],
) -> None:
    """The round serves the arrivals that were waiting when its plan was asked for
    (`served`: out of the buffer, whether still there or ended since), takes those it
    planned (`taken`), and closes both windows. Arrivals that came while its plan was made
    wait for a window of their own."""
    core.held_until = None
    core.completions_due = None
    core.arrivals = [job_id for job_id in core.arrivals if job_id not in served]
    core.arrivals_due = now + core.config.arrival_window_s if core.arrivals else None
    for job_id in taken:
        core.move(core.jobs[job_id], JobState.PENDING, out)


def plan_made(core: Core, event: PlanMade, now: float, out: list[Command]) -> None:
    """Carry on with what the plan was asked for, if what it planned is still there; else
    nothing, and the next `maybe_start_round` (or `finish_round`) asks again."""
    pending = planning.answered(core, event, out)
    if pending is None:
        return
    match pending.purpose:
        case PlanPurpose.ROUND:
            planned = planning.still_planned(core, pending)
            if planned:
                kept = {job.request.id for job in planned}
                taken = tuple(a for a in pending.arriving if a in kept)
                _take_buffers(core, pending.arriving, taken, now, out)
                start_round(core, planned, planning.made(event.outcome), now, out)
        case PlanPurpose.BESIDE:
            _beside_planned(core, pending, event.outcome, now, out)
        case PlanPurpose.REPLAN:
            _replanned(core, pending, event.outcome, now, out)
        case _ as unreachable:
            assert_never(unreachable)


def _waits(core: Core, now: float, held: bool) -> bool:
    """Whether a round that no arrival asks for waits (or is not needed at all)."""
    # What a finish freed may be for jobs still starting or resuming (a finish during
    # a round, whose jobs resume after it). Planned now, the round would plan none of
    # them and the freed processes would stay idle until the next arrival or finish:
    # hold it until they all run (their hello or Resumed comes through here), but no
    # longer than a round waits for its pauses (a resume that never reports).
    settling = any(
        job.state in (JobState.STARTING, JobState.RESUMING) for job in core.live.values()
    )
    # Arrivals still in their window count: a round serves both buffers.
    can_plan = bool(core.arrivals) or any(plannable(j) for j in core.live.values())
    expired = core.held_until is not None and now >= core.held_until
    if settling and (held or not can_plan) and not expired:
        if core.held_until is None:
            core.held_until = now + core.config.pause_timeout_s
        core.completions_due = None
        return True
    if not can_plan:  # nothing left that could take them
        core.completions_due = None
        core.held_until = None
        return True
    return False


def start_beside_running(core: Core, now: float, out: list[Command]) -> None:
    """Arrivals that fit in what the jobs holding processes leave start at once, planned
    on that alone: no one is paused for them, so nothing is worth waiting for (an idle
    node's first job starts now, not at the window's close). Giving the node's share
    back among all of them pauses someone: that waits for the arrival window, whose
    round then plans every job (the gate judges whom to change)."""
    arriving = [core.jobs[job_id] for job_id in core.arrivals]
    left = core.node.cpu_workers - core.loader_processes()
    if left < sum(job.request.gpus for job in arriving) or any(j.fixed for j in arriving):
        return
    # Tried once for these arrivals on this much room: every heartbeat meanwhile would
    # plan them again to the same answer.
    tried = (tuple(core.arrivals), left)
    if tried == core.tried_beside:
        return
    core.tried_beside = tried
    node = _room_beside(core, left)
    learning.relearn_contention(core)
    planning.ask(core, PlanPurpose.BESIDE, arriving, node, out, now=now, arriving=tried[0])


def _room_beside(core: Core, left: int) -> NodeSpec:
    """The node as arrivals beside the running jobs may have it: `left` loader processes
    and the decoder's share the jobs holding processes leave."""
    held = [job for job in core.live.values() if job.state.holds_resources]
    shares = sum(share_of(holding(job)) for job in held)
    return replace(
        core.node,
        cpu_workers=left,
        decoder_capacity=core.node.decoder_capacity * max(0.0, 1.0 - shares),
    )


def _beside_planned(
    core: Core, pending: PendingPlan, outcome: PlanOutcome, now: float, out: list[Command]
) -> None:
    """Start the arrivals beside the running jobs on their plan, if it fits what is left."""
    arriving = planning.still_planned(core, pending)
    if not arriving or core.round is not None:
        return
    if outcome.plan is None and isinstance(outcome.error, InvalidRequest):
        return
    plan = planning.made(outcome)
    left = core.node.cpu_workers - core.loader_processes()
    asked = sum(
        j.request.gpus * planned_allocation(plan, j.request.id).workers_per_gpu for j in arriving
    )
    if asked > left:  # more than the leftover holds (`static` honours asked workers): wait
        return
    held = any(job.state.holds_resources for job in core.live.values())
    rebalance_due = core.arrivals_due if held else None
    # Arrivals that came while the plan was made keep their window (it serves the
    # rebalance too); those it was asked for are served, started or ended since.
    core.arrivals = [job_id for job_id in core.arrivals if job_id not in pending.arriving]
    if not core.arrivals:
        core.arrivals_due = None
    core.tried_beside = None  # only the tries that failed are remembered
    for job in arriving:
        core.move(job, JobState.PENDING, out)
    start_round(core, arriving, plan, now, out)
    if rebalance_due is not None and core.completions_due is None and not core.arrivals:
        core.completions_due = rebalance_due


def start_round(
    core: Core, planned: list[Job], plan: AllocationPlan, now: float, out: list[Command]
) -> None:
    """Start a round with `plan` for `planned`."""
    core.generation += 1
    for job in planned:
        job.predicted_samples_per_s = plan.allocations[job.request.id].predicted_samples_per_s
        job.replan_basis = None  # re-based on its next heartbeat, on what it then runs
        job.replan_bend = job.spec.knee_sharpness or plan.knee_sharpness
    current = Round(gen=core.generation, deadline=now + core.config.pause_timeout_s)
    core.round = current
    targets = {job.request.id: planned_allocation(plan, job.request.id) for job in planned}
    running = [
        job for job in planned if job.state is JobState.RUNNING and job.allocation is not None
    ]
    # Workers or decode mode change: the job must pause. A share alone changes live.
    changed = [job for job in running if needs_pause(job.allocation, targets[job.request.id])]
    kept = _gate(core, plan, changed, out)
    out.append(Planned(core.generation, plan))
    for job in running:
        target = targets[job.request.id]
        assert job.allocation is not None
        moved = abs(target.decoder_share - job.allocation.decoder_share)
        if job not in changed and moved > _SHARE_STEP:
            job.allocation = job.planned = target
            out.append(SetShare(job.request.id, current.gen, target.decoder_share))
    for job in planned:
        target = targets[job.request.id]
        if job.state is JobState.PENDING:
            job.planned = target
            current.launches.append(job.request.id)
        elif job in changed and job.request.id not in kept:
            job.planned = target
            core.move(job, JobState.PAUSING, out)
            out.append(Pause(job.request.id, current.gen))
            current.waiting.add(job.request.id)
    if not current.waiting:
        finish_round(core, now, out)


def _gate(core: Core, plan: AllocationPlan, changed: list[Job], out: list[Command]) -> set[str]:
    if not core.config.gate or not changed:
        return set()
    decision = decide(
        plan,
        [
            RunningJob(
                spec=job.spec,
                current_workers_per_gpu=workers_of(job.allocation),
                remaining_samples=remaining_samples(job),
                pause_cost_s=learning.pause_cost_s(core, job),
            )
            for job in changed
        ],
        capacity=core.node.cpu_workers,
        hysteresis=core.config.gate_hysteresis,
    )
    out.append(Gated(core.generation, decision.verdicts))
    return set(decision.kept)


def finish_round(core: Core, now: float, out: list[Command]) -> None:
    """The round's pauses are all in: launch its new jobs and resume its paused ones. If
    its plan no longer fits the node (`stale`), its flexible jobs are planned again first
    (`_replanned` then ends it)."""
    current = core.round
    assert current is not None
    if core.planning is not None:  # its flexible jobs' plan is in flight: that ends it
        return
    flexible = _flexible(core, current)
    if current.stale and flexible:
        node = planning.node_left(core, also_fixed=(JobState.RUNNING,))
        planning.ask(core, PlanPurpose.REPLAN, flexible, node, out, now=now, round_gen=current.gen)
        return
    _end_round(core, current, now, out)


def _flexible(core: Core, current: Round) -> list[Job]:
    """The round's jobs still free to take any allocation: paused or new."""
    return [core.jobs[job_id] for job_id in (*current.paused, *current.launches)]


def _replanned(
    core: Core, pending: PendingPlan, outcome: PlanOutcome, now: float, out: list[Command]
) -> None:
    """The round's flexible jobs planned again on the processes the running jobs leave
    (the round's plan counted processes that a straggler kept, or left out those of a job
    that has since ended): they launch and resume on it. What the policy raised is raised
    once the round has ended on the plan it had."""
    current = core.round
    if current is None or current.gen != pending.round_gen:
        return
    flexible = planning.still_planned(core, pending)
    if flexible is None:
        finish_round(core, now, out)  # planned again, on what is there now
        return
    if outcome.plan is not None:
        for job in flexible:
            job.planned = planned_allocation(outcome.plan, job.request.id)
        out.append(Replanned(current.gen, outcome.plan))
    _end_round(core, current, now, out)
    if outcome.error is not None:  # said once the round has ended on the plan it had
        raise outcome.error


def _end_round(core: Core, current: Round, now: float, out: list[Command]) -> None:
    core.round = None
    for job_id in current.launches:
        job = core.jobs[job_id]
        if job.state is JobState.PENDING and job.planned is not None:
            core.move(job, JobState.STARTING, out)
            job.last_heard = now
            out.append(Launch(job_id, current.gen, job.planned, job.checkpoint))
    for job_id in current.paused:
        job = core.jobs[job_id]
        if job.state is JobState.PAUSED and job.planned is not None:
            core.move(job, JobState.RESUMING, out)
            out.append(job.resume(current.gen, job.planned))


def give_up_on_stragglers(core: Core, current: Round, now: float, out: list[Command]) -> None:
    """Jobs still pausing at the timeout keep their old allocation; the jobs of the round
    that are flexible (paused or new) are re-planned on the processes left over."""
    stragglers = [core.jobs[job_id] for job_id in sorted(current.waiting)]
    current.waiting.clear()
    for job in stragglers:
        job.planned = job.allocation
        core.move(job, JobState.RUNNING, out, StateReason.PAUSE_TIMED_OUT)
    current.stale = True
    finish_round(core, now, out)


def give_up_late_plan(core: Core, now: float, out: list[Command]) -> None:
    """A plan past `plan_timeout_s` is given up (scheduler/planning.py): a round that
    waits for its replan asks again at once; a round's or arrivals' plan is asked for again
    when `maybe_start_round` next finds its window closed."""
    pending = planning.abandon_late(core, now, out)
    if pending is not None and pending.purpose is PlanPurpose.REPLAN and core.round is not None:
        finish_round(core, now, out)


def leave_round(
    core: Core, job_id: str, now: float, out: list[Command], *, freed: bool = False
) -> None:
    """The job is out of the open round, if one is; `freed`: it ended holding
    processes, which the round's flexible jobs are then planned again to take."""
    current = core.round
    if current is None:
        return
    current.stale = current.stale or freed
    if job_id in current.launches:
        current.launches.remove(job_id)
    if job_id in current.paused:
        current.paused.remove(job_id)
    if job_id in current.waiting:
        current.waiting.discard(job_id)
        if not current.waiting:
            finish_round(core, now, out)
