"""Rounds: when the arrival or completion window closes, plan every job with the configured
policy, pause the running jobs whose allocation changes (those the reallocation gate lets
through), and once they have all reported `paused`, or the pause timeout passed, launch the
new jobs and resume the paused ones. A round serves both buffers, whichever window closed;
only one runs at a time. Arrivals that fit beside the running jobs start at once, planned
on the leftover alone. Every plan has a generation number its commands carry."""

from dataclasses import replace

from allocator import AllocationPlan, AllocationRequest, InvalidRequest, JobSpec, NodeSpec, allocate
from scheduler import learning
from scheduler.commands import (
    Allocation,
    Command,
    Gated,
    Launch,
    Pause,
    Planned,
    Replanned,
    SetShare,
)
from scheduler.core import Core
from scheduler.curves import JobCurve
from scheduler.gate import RunningJob, decide
from scheduler.guard import plan_surviving
from scheduler.jobs import (
    Job,
    Round,
    holding,
    needs_pause,
    plannable,
    planned_allocation,
    planned_spec,
    remaining_samples,
    share_of,
    workers_of,
)
from scheduler.reasons import StateReason
from scheduler.states import JobState

# Share changes smaller than this are noise of the plan, not worth a message.
_SHARE_STEP = 0.01


def maybe_start_round(core: Core, now: float, out: list[Command]) -> None:
    if core.round is not None:
        return
    early = core.arrivals_due is not None and now < core.arrivals_due
    if early and core.config.start_when_free:
        start_beside_running(core, now, out)
        if core.round is not None:
            return
    arrivals_due = core.arrivals_due is not None and now >= core.arrivals_due
    completions_due = core.completions_due is not None and now >= core.completions_due
    held = core.held_until is not None
    if not (arrivals_due or completions_due or held):
        return
    if not arrivals_due and _waits(core, now, held):
        return
    core.held_until = None
    # A round serves both buffers, whichever window closed: an arrival left waiting would
    # only pause the same jobs again when its own window closes.
    arriving = core.arrivals
    core.arrivals, core.arrivals_due = [], None
    core.completions_due = None
    for job_id in arriving:
        core.move(core.jobs[job_id], JobState.PENDING, out)
    # Shortest remaining work first: the baselines and `waa` break ties in request order,
    # so the jobs nearest completion get their leftovers. `optimal` weighs the work left
    # itself (`planned_spec`).
    planned = sorted((job for job in core.live.values() if plannable(job)), key=remaining_samples)
    if not planned:
        return
    start_round(core, planned, now, out)


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
    held = [job for job in core.live.values() if job.state.holds_resources]
    left = core.node.cpu_workers - core.loader_processes()
    if left < sum(job.request.gpus for job in arriving) or any(j.fixed for j in arriving):
        return
    # Tried once for these arrivals on this much room: every heartbeat meanwhile would
    # plan them again to the same answer.
    tried = (tuple(core.arrivals), left)
    if tried == core.tried_beside:
        return
    core.tried_beside = tried
    shares = sum(share_of(holding(job)) for job in held)
    node = replace(
        core.node,
        cpu_workers=left,
        decoder_capacity=core.node.decoder_capacity * max(0.0, 1.0 - shares),
    )
    learning.relearn_contention(core)
    try:
        plan = plan_for(core, arriving, node, out)
    except InvalidRequest:
        return
    asked = sum(
        j.request.gpus * planned_allocation(plan, j.request.id).workers_per_gpu for j in arriving
    )
    if asked > left:  # more than the leftover holds (`static` honours asked workers): wait
        return
    rebalance_due = core.arrivals_due if held else None
    core.arrivals, core.arrivals_due = [], None
    core.tried_beside = None  # only the tries that failed are remembered
    for job in arriving:
        core.move(job, JobState.PENDING, out)
    start_round(core, arriving, now, out, plan)
    if rebalance_due is not None and core.completions_due is None:
        core.completions_due = rebalance_due


def start_round(
    core: Core,
    planned: list[Job],
    now: float,
    out: list[Command],
    plan: AllocationPlan | None = None,
) -> None:
    """Start a round with `plan` for `planned` (None: the policy's, on the node less the
    jobs no plan can change now)."""
    if plan is None:
        learning.relearn_contention(core)
        plan = plan_for(core, planned, node_left(core), out)
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


def plan_for(core: Core, jobs: list[Job], node: NodeSpec, out: list[Command]) -> AllocationPlan:
    """The configured policy's plan for `jobs` on `node`: each job's work left and what
    it must keep, the fairness floor, and the completion window its fluid model waits.
    A job whose learned curve it cannot plan goes back to its prior (scheduler/guard.py)."""
    request = AllocationRequest(
        node=node,
        jobs=tuple(_policy_spec(core, job) for job in jobs),
        fair_floor=core.config.fair_floor,
        regrow_delay_s=core.config.completion_window_s,
    )
    planned, refused = plan_surviving(
        lambda specs: allocate(replace(request, jobs=tuple(specs)), core.config.policy),
        request.jobs,
        [job.prior if job.spec != job.prior else None for job in jobs],
    )
    for refusal in refused:  # it learns again from its next heartbeats
        job = core.jobs[refusal.job_id]
        job.curve, job.spec = JobCurve(), job.prior
    out.extend(refused)
    return planned


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
    current = core.round
    assert current is not None
    if current.stale:
        _replan_flexible(core, current, out)
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


def _replan_flexible(core: Core, current: Round, out: list[Command]) -> None:
    """The round's flexible jobs (paused or new) planned again on the processes the
    running jobs leave: the round's plan counted processes that a straggler kept, or
    left out those of a job that has since ended."""
    flexible = [core.jobs[j] for j in (*current.paused, *current.launches)]
    if not flexible:
        return
    replan = plan_for(core, flexible, node_left(core, also_fixed=(JobState.RUNNING,)), out)
    for job in flexible:
        job.planned = planned_allocation(replan, job.request.id)
    out.append(Replanned(current.gen, replan))


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
