"""What the core learns while jobs run, and how it plans with it: each job's prior from the
throughput model, its curve from its heartbeats (scheduler/curves.py), the node's
contention from the loader timings of jobs running together (tpm/joint.py), what a pause
costs (the job's own, else the node's of its kind), when what it learned asks for a round
sooner, and a refitted model taken in (`ModelRefitted`)."""

import statistics
from dataclasses import replace

from allocator import InvalidRequest, JobSpec
from allocator.contention import ContentionCurve
from allocator.throughput import job_samples_per_s
from scheduler.commands import Allocation
from scheduler.core import Core
from scheduler.curves import SHARPEST, Observation
from scheduler.errors import RefitRejected
from scheduler.events import Heartbeat, ModelRefitted
from scheduler.jobs import Job
from scheduler.rates import RateModel
from scheduler.refit import check_fit
from scheduler.request import DEFAULT_PIPELINE, JobRequest
from scheduler.states import JobState
from tpm import TpmError
from tpm.joint import LoaderTiming, fit_joint_contention

# Weight of the newest measured pause gap in a job's pause cost estimate.
_PAUSE_COST_SMOOTHING = 0.5
# A job's learned bend that moves by more than this factor from the one its last plan had
# asks for a round: p = 3 against 8 moves its best share of workers, 3 against 3.5 does not.
BEND_MOVED = 1.5
# From this bend on a knee is hard as far as a plan can tell: at its knee the job runs at
# 2^(-1/8), 92 %, of its GPU's rate, and at 24 at 97 %.
HARD_BEND = 8.0


def prior(core: Core, rates: RateModel, request: JobRequest) -> JobSpec:
    """What the job is expected to do before its heartbeats say: the model's prediction,
    on the config's bend where the job states none."""
    spec = rates.job_spec(request)
    if spec.knee_sharpness is None and core.config.knee_sharpness is not None:
        return replace(spec, knee_sharpness=core.config.knee_sharpness)
    return spec


def pause_cost_s(core: Core, job: Job) -> float:
    """What a pause costs the job: as it measured; before its first, the median of the
    pauses of its kind measured on this node (resizing in place, or not); before any,
    the config's default for its kind. A resize in place also waits for one of the
    job's own workers to make its first batch, as long as the job's timed workers take
    to make one: the node's figure is kept without the refills it measured."""
    if job.pause_cost_s is not None:
        return job.pause_cost_s
    hot = job.request.hot_resize
    config = core.config
    if measured := core.pauses[hot]:
        node = statistics.median(measured)
    else:
        node = config.hot_pause_cost_s if hot else config.default_pause_cost_s
    return node + refill_s(job)


def refill_s(job: Job) -> float:
    """The first batch a resize in place waits for (0 for a restart: its own start)."""
    if not job.request.hot_resize:
        return 0.0
    return job.curve.refill_s(job.spec.batch_size_per_gpu)


def measured_pause(core: Core, job: Job, gap_s: float) -> None:
    """The job resumed `gap_s` after its pause: its own pause cost, and the node's of its
    kind."""
    job.pause_cost_s = (
        gap_s
        if job.pause_cost_s is None
        else _PAUSE_COST_SMOOTHING * gap_s + (1.0 - _PAUSE_COST_SMOOTHING) * job.pause_cost_s
    )
    refill = refill_s(job)  # the job's own, not the node's: kept apart
    core.pauses[job.request.hot_resize].append(max(0.0, gap_s - refill))


def relearn_contention(core: Core) -> None:
    """Plan on the contention the jobs measured together (tpm/joint.py), the configured
    curve where they did not reach. A job's learned cost was taken at the curve of its
    heartbeat's time; its window renews it within `WINDOW` heartbeats."""
    if not core.timings_new:
        return
    core.timings_new = False
    points = fit_joint_contention(
        tuple(core.timings), core.prior_contention, most=core.node.cpu_workers
    )
    if points is not None:
        core.node = replace(core.node, contention=ContentionCurve(points))
        core.contention_learned = True


def heard_rate(core: Core, job: Job, allocation: Allocation, event: Heartbeat, now: float) -> None:
    """A running job's steady heartbeat at its allocation: its loader timing for the node's
    contention, and its rate for its curve."""
    processes = core.loader_processes()
    on_device = allocation.decode_mode == "device"
    # Timed at a load the plan knows: every job holding processes runs with them (none
    # starting, pausing, paused or resuming, whose loaders the count has but the node
    # may not run).
    settled = not core.unsettled
    if event.loader_cost_s > 0.0 and not on_device and settled and core.config.learn_contention:
        core.timings.append(LoaderTiming(job.request.id, processes, event.loader_cost_s))
        core.timings_new = True
    if core.config.learn_curves:
        learn(core, job, allocation, event, processes=processes, now=now)


def learn(
    core: Core, job: Job, allocation: Allocation, event: Heartbeat, *, processes: int, now: float
) -> None:
    """Weigh a heartbeat into the job's curve (scheduler/curves.py), taken with
    `processes` loader processes on the node: later plans use what it learned, and the
    prediction for the job's allocation now follows it."""
    efficiency = core.node.contention.efficiency(processes)
    on_device = allocation.decode_mode == "device"
    seen = Observation(
        event.samples_per_s,
        event.idle_fraction,
        event.workers_per_gpu,
        efficiency,
        loaders=not on_device,
        loader_cost_s=event.loader_cost_s,
        loader_cpu_s=event.loader_cpu_s,
        loader_wait_s=event.loader_wait_s,
        cpu_cost_s=event.cpu_cost_s,
        train_cpu_s=event.train_cpu_s,
        train_wait_s=event.train_wait_s,
        refill_fraction=event.refill_fraction,
    )
    workers = allocation.workers_per_gpu
    # A round is asked for what the job's curve says of it, not for the cores its
    # neighbours take now: the trigger weighs it as if it had them to itself.
    if job.replan_basis is None:
        alone = job.curve.learned(job.prior, alone=True)
        job.replan_basis = job_samples_per_s(alone, workers, efficiency)
    job.curve.observe(job.spec, seen)
    was_clocked = job.spec.cpu_clocked
    job.spec = job.curve.learned(job.prior)
    if core.node.cpu_cores is not None and not was_clocked and job.spec.cpu_clocked:
        # Plans weighed splits without the node's one budget of cores while a running
        # job's CPU clocks were unknown (allocator/cpunode.py): once all are, a round.
        running = (j for j in core.live.values() if j.state is JobState.RUNNING)
        if all(j.spec.cpu_clocked for j in running):
            replan_soon(core, now)
    if not on_device:  # a device job's rate is its decoder share's: the plan's stands
        job.predicted_samples_per_s = job_samples_per_s(job.spec, workers, efficiency)
        alone = job.curve.learned(job.prior, alone=True)
        replan_if_off(core, job, job_samples_per_s(alone, workers, efficiency), now)


def replan_if_off(core: Core, job: Job, learned: float, now: float) -> None:
    """Ask for a round (as a completion does) when the job's learned curve predicts its
    allocation more than `replan_error` away from what the last plan assumed, or its
    learned bend is more than a factor of `BEND_MOVED` from the one it was planned on: a
    prior that was far off should not hold until the next arrival or finish."""
    basis, bend = job.replan_basis, job.spec.knee_sharpness
    if basis is None or basis <= 0.0:  # no loader (`job.steps`): nothing to resize
        return
    off = abs(learned / basis - 1.0) > core.config.replan_error
    # Bends past HARD_BEND are all a hard knee to a plan: a heartbeat's noise moves a
    # hard knee's median between 8 and 24, which asks for nothing.
    planned = min(job.replan_bend or SHARPEST, HARD_BEND)
    bent = (
        bend is not None
        and max(min(bend, HARD_BEND) / planned, planned / min(bend, HARD_BEND)) > BEND_MOVED
    )
    if not (off or bent):
        return
    job.replan_basis, job.replan_bend = learned, bend or job.replan_bend
    replan_soon(core, now)


def replan_soon(core: Core, now: float) -> None:
    """A round after the replan window, as a completion asks for one."""
    if core.completions_due is None:  # else with the completion window already open
        core.completions_due = now + core.config.replan_window_s


def use_model(core: Core, event: ModelRefitted) -> None:
    """Plan with a refitted model from now on, if it is trusted and can plan: its
    held-out R^2 (`quality`) must reach the config's `min_refit_r2` (RefitUntrusted),
    and it must predict the default pipeline and every live job (RefitRejected);
    otherwise nothing changes. Allocations change at the next round, not here."""
    rates, node, quality = event.rates, event.node, event.quality
    if quality is not None:
        check_fit(quality, core.config.min_refit_r2)
    try:
        if rates.model is not None:
            rates.model.predict_sample_cost_s(DEFAULT_PIPELINE)
        specs = {job_id: prior(core, rates, job.request) for job_id, job in core.live.items()}
    except (TpmError, InvalidRequest) as error:
        raise RefitRejected(str(error)) from None
    core.rates, core.node = rates, node
    core.prior_contention, core.timings_new = node.contention, bool(core.timings)
    core.contention_learned = False
    relearn_contention(core)  # the new curve, corrected by what the jobs measured
    for job_id, spec in specs.items():
        job = core.live[job_id]
        job.prior, job.spec = spec, job.curve.learned(spec)
