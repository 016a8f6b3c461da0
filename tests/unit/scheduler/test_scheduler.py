"""The scheduler core driven with literal events and a hand-held clock."""

from dataclasses import replace

import pytest

from allocator import ContentionCurve, NodeSpec
from scheduler.config import SchedulerConfig
from scheduler.errors import RefitUntrusted, SchedulerError, UnknownJob
from scheduler.messages import (
    AgentHello,
    Allocation,
    Cancel,
    Exited,
    Failed,
    Finished,
    GateChoice,
    Gated,
    Heartbeat,
    JobCancelled,
    JobRequest,
    JobSubmitted,
    Launch,
    ModelRefitted,
    Pause,
    Paused,
    RanUnmanaged,
    Reattached,
    Replanned,
    Restarting,
    Resume,
    Resumed,
    SetShare,
    StaleMessage,
    StateChanged,
    Tick,
)
from scheduler.rates import RateModel
from scheduler.reasons import StateReason, Waiting, WaitReason
from scheduler.refit import FitQuality
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from tests.unit.scheduler.builders import FlatModel, job, only, scheduler


def workers(core: Scheduler, job_id: str) -> int:
    """Workers per GPU the job runs with now."""
    allocation = core.status(job_id).allocation
    assert allocation is not None
    return allocation.workers_per_gpu


def start(core: Scheduler, job_id: str, now: float, iterations: int | None = 10_000) -> Launch:
    """Submit a job with window 0, return its Launch and say hello as its agent."""
    launches = only(core.handle(JobSubmitted(job(job_id, iterations=iterations)), now), Launch)
    assert [launch.job_id for launch in launches] == [job_id]
    core.handle(AgentHello(job_id, launches[0].gen, 0), now)
    return launches[0]


def start_second(
    core: Scheduler, first: str, second: str, now: float, step_time_s: float = 0.1
) -> None:
    """Submit `second` while `first` runs alone with all it wants: `first` pauses and shrinks,
    `second` launches; both agents answer."""
    out = core.handle(JobSubmitted(job(second, step_time_s=step_time_s)), now)
    (pause,) = only(out, Pause)
    out = core.handle(Paused(first, pause.gen, 0), now)
    (launch,) = only(out, Launch)
    (resume,) = only(out, Resume)
    core.handle(AgentHello(second, launch.gen, 0), now)
    core.handle(Resumed(first, resume.gen, resume.allocation.workers_per_gpu, 0.5), now)


def test_window_zero_launches_at_once_with_the_plan() -> None:
    core = scheduler(cpu_workers=64)
    out = core.handle(JobSubmitted(job("a")), now=0.0)
    (launch,) = only(out, Launch)
    assert launch.gen == 1
    assert launch.allocation.workers_per_gpu == 10  # 100 * 0.01 / 0.1
    assert core.status("a").state is JobState.STARTING
    core.handle(AgentHello("a", 1, 0), now=1.0)
    assert core.status("a").state is JobState.RUNNING
    assert core.status("a").allocation == launch.allocation


def test_arrivals_in_one_window_are_planned_together() -> None:
    core = scheduler(cpu_workers=12, window_s=30.0)
    assert only(core.handle(JobSubmitted(job("a")), now=0.0), Launch) == []
    assert only(core.handle(JobSubmitted(job("b")), now=10.0), Launch) == []
    assert only(core.handle(Tick(), now=29.9), Launch) == []
    assert core.next_deadline() == pytest.approx(30.0)
    launches = only(core.handle(Tick(), now=30.0), Launch)
    assert {launch.job_id for launch in launches} == {"a", "b"}
    assert {launch.gen for launch in launches} == {1}
    assert sum(launch.allocation.workers_per_gpu for launch in launches) == 12


def test_an_arrival_makes_a_running_job_shrink_through_pause_and_resume() -> None:
    core = scheduler(cpu_workers=12)
    start(core, "a", 0.0)
    assert workers(core, "a") == 10
    out = core.handle(JobSubmitted(job("b")), now=5.0)
    assert only(out, Pause) == [Pause("a", 2)]
    assert only(out, Launch) == []  # b waits until a has paused
    assert core.status("b").state is JobState.PENDING
    out = core.handle(Paused("a", 2, iteration=40), now=6.0)
    (launch,) = only(out, Launch)
    (resume,) = only(out, Resume)
    assert (launch.job_id, launch.gen) == ("b", 2)
    assert (resume.job_id, resume.gen) == ("a", 2)
    assert launch.allocation.workers_per_gpu + resume.allocation.workers_per_gpu <= 12
    core.handle(Resumed("a", 2, resume.allocation.workers_per_gpu, gap_s=3.0), now=9.0)
    status = core.status("a")
    assert status.state is JobState.RUNNING
    assert status.allocation == resume.allocation
    assert status.pause_cost_s == 3.0


def test_a_pause_is_weighed_at_what_pauses_of_its_kind_cost_on_this_node() -> None:
    """Before its first pause a job's cost is its kind's: a restart from its checkpoint
    (the paper's 16 s) or an in-place resize (0.5 s), until pauses of its kind were measured
    here; then their median; once it paused itself, its own."""
    core = scheduler(cpu_workers=12)
    start(core, "a", 0.0)  # a restart's kind
    assert core.status("a").pause_cost_s == 16.0
    out = core.handle(JobSubmitted(replace(job("b"), hot_resize=True)), now=1.0)
    assert core.status("b").pause_cost_s == 0.5
    (pause,) = only(out, Pause)  # "a" makes room for "b"
    (resume,) = only(core.handle(Paused("a", pause.gen, 0), now=2.0), Resume)
    core.handle(Resumed("a", resume.gen, resume.allocation.workers_per_gpu, 9.0), now=11.0)
    core.handle(JobSubmitted(job("c")), now=12.0)
    core.handle(JobSubmitted(replace(job("d"), hot_resize=True)), now=12.0)
    assert core.status("c").pause_cost_s == 9.0, "a restart measured here"
    assert core.status("d").pause_cost_s == 0.5, "no in-place resize measured yet"
    assert core.status("a").pause_cost_s == 9.0


def test_a_resize_in_place_is_weighed_with_the_first_batch_its_own_workers_make() -> None:
    """A resize in place waits for one worker to make a whole batch: a job whose timed
    workers take 0.01 s a sample pays 100 x 0.01 = 1 s beyond what its kind costs the node,
    and the node's figure is kept without the refills it measured."""
    core = scheduler(cpu_workers=12)
    (launch,) = only(core.handle(JobSubmitted(replace(job("a"), hot_resize=True)), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), now=0.0)
    assert core.status("a").pause_cost_s == 0.5, "untimed: its kind's default"
    workers = launch.allocation.workers_per_gpu
    for second in range(1, 5):  # its curve as stated (a round would pause it): 10 workers
        beat = Heartbeat("a", launch.gen, 10 * second, 1000.0, 0.0, workers, loader_cost_s=0.01)
        assert only(core.handle(beat, now=float(second)), Pause) == []
    assert core.status("a").pause_cost_s == pytest.approx(0.5 + 1.0)
    out = core.handle(JobSubmitted(replace(job("b"), hot_resize=True)), now=5.0)
    (pause,) = only(out, Pause)  # "a" makes room for "b"
    (resume,) = only(core.handle(Paused("a", pause.gen, 40), now=5.5), Resume)
    core.handle(Resumed("a", resume.gen, resume.allocation.workers_per_gpu, 2.0), now=7.0)
    assert core.status("a").pause_cost_s == 2.0, "its own, as measured"
    assert core.status("b").pause_cost_s == pytest.approx(1.0), "the node's, without a's refill"


def test_completions_wait_for_their_window_then_grow_the_others() -> None:
    core = scheduler(cpu_workers=12, window_s=0.0)
    start(core, "a", 0.0)
    start_second(core, "a", "b", 0.5)
    assert workers(core, "a") < 10
    out = core.handle(Finished("b"), now=50.0)
    assert only(out, Pause) == [Pause("a", 3)]
    out = core.handle(Paused("a", 3, 0), now=51.0)
    assert only(out, Resume)[0].allocation.workers_per_gpu == 10


def test_completion_window_holds_the_replan() -> None:
    core = scheduler(cpu_workers=12, window_s=0.0, completion_window_s=30.0)
    start(core, "a", 0.0)
    start_second(core, "a", "b", 0.5)
    assert only(core.handle(Finished("b"), now=50.0), Pause) == []
    core.handle(Heartbeat("a", 2, 100, 200.0, 0.4, 6), now=75.0)
    assert only(core.handle(Tick(), now=79.0), Pause) == []
    assert core.next_deadline() == pytest.approx(80.0)
    assert only(core.handle(Tick(), now=80.0), Pause) == [Pause("a", 3)]


def test_stale_pause_is_recorded_and_ignored() -> None:
    core = scheduler(cpu_workers=12)
    start(core, "a", 0.0)
    core.handle(JobSubmitted(job("b")), now=1.0)
    out = core.handle(Paused("a", 1, 0), now=2.0)  # gen 1 is not the round's gen 2
    assert only(out, StaleMessage)
    assert only(out, Launch) == []
    assert core.status("a").state is JobState.PAUSING


def test_straggler_keeps_its_allocation_and_the_rest_fit_around_it() -> None:
    core = scheduler(cpu_workers=12, pause_timeout_s=20.0)
    start(core, "a", 0.0)
    core.handle(JobSubmitted(job("b")), now=1.0)
    core.handle(Heartbeat("a", 1, 10, 500.0, 0.0, 10), now=15.0)
    out = core.handle(Tick(), now=21.0)
    assert core.status("a").state is JobState.RUNNING
    assert workers(core, "a") == 10
    (launch,) = only(out, Launch)
    assert launch.job_id == "b"
    assert launch.allocation.workers_per_gpu == 2  # what is left of 12
    # Its pause arrives late: the core resumes it as it was.
    out = core.handle(Paused("a", 2, 20), now=22.0)
    (resume,) = only(out, Resume)
    assert resume.allocation.workers_per_gpu == 10
    assert core.status("a").state is JobState.RESUMING


@pytest.mark.parametrize(
    ("requested", "said"),
    # Its request's length; else the one its script says; its request's over its script's
    # (a zoo trainer stops at its `iterations`, inside an epoch).
    [(1_000, 0), (None, 1_000), (1_000, 1_000_000)],
)
def test_gate_leaves_a_nearly_done_job_alone(requested: int | None, said: int) -> None:
    core = scheduler(cpu_workers=24, gate=True)
    start(core, "a", 0.0, iterations=requested)
    start_second(core, "a", "b", 1.0, step_time_s=0.05)  # b wants 20: a must shrink
    assert workers(core, "a") < 10
    core.handle(Heartbeat("a", 2, 990, 100.0, 0.5, 4, total_iterations=said), now=100.0)
    assert core.status("a").total_iterations == 1_000
    # b finishes: a could grow back to 10, but 10 iterations left are not worth a pause.
    out = core.handle(Finished("b"), now=101.0)
    assert only(out, Pause) == []
    (gate,) = only(out, Gated)
    assert gate.verdicts["a"].choice is GateChoice.KEEP
    assert str(gate.verdicts["a"]).startswith("kept")


def test_a_scripts_batch_counts_its_remaining_work() -> None:
    # As above, 10 iterations left; its script's steps take 10,000 times the samples its
    # request said: they are worth growing it back for.
    core = scheduler(cpu_workers=24, gate=True)
    start(core, "a", 0.0, iterations=1_000)
    start_second(core, "a", "b", 1.0, step_time_s=0.05)
    core.handle(Heartbeat("a", 2, 990, 100.0, 0.5, 4, batch_samples=1_000_000), now=100.0)
    assert core.status("a").script_batch_size == 1_000_000
    (pause,) = only(core.handle(Finished("b"), now=101.0), Pause)
    assert pause.job_id == "a"


def test_gate_still_shrinks_what_capacity_forces() -> None:
    core = scheduler(cpu_workers=12, gate=True)
    start(core, "a", 0.0, iterations=1_000)
    core.handle(Heartbeat("a", 1, 999, 100.0, 0.0, 10), now=10.0)
    out = core.handle(JobSubmitted(job("b")), now=11.0)
    assert only(out, Pause) == [Pause("a", 2)]
    (gate,) = only(out, Gated)
    assert gate.verdicts["a"].choice is GateChoice.FORCED
    assert str(gate.verdicts["a"]).startswith("forced")


def test_lost_job_fails_and_frees_its_workers() -> None:
    core = scheduler(cpu_workers=12)
    start(core, "a", 0.0)
    start_second(core, "a", "b", 1.5)
    core.handle(Heartbeat("a", 2, 5, 100.0, 0.0, 2), now=10.0)
    out = core.handle(Tick(), now=12.0)  # b last heard at 1.5: lost
    assert core.status("b").state is JobState.FAILED
    assert only(out, Pause) == [Pause("a", 3)]


def test_a_dead_agent_is_relaunched_from_its_checkpoint_within_its_restart_cap() -> None:
    core = scheduler(cpu_workers=12)
    request = replace(job("a"), max_restarts=1)
    (launch,) = only(core.handle(JobSubmitted(request), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    (pause,) = only(core.handle(JobSubmitted(job("b")), 1.0), Pause)  # a shrinks for b
    out = core.handle(Paused("a", pause.gen, 40, "/ckpt/a"), 1.0)
    (resume,) = only(out, Resume)
    core.handle(Resumed("a", resume.gen, resume.allocation.workers_per_gpu, 0.5), 1.5)
    out = core.handle(Failed("a", "agent exited with code -9"), now=2.0)
    assert core.status("a").state is JobState.STARTING  # window 0: replanned at once
    assert core.status("a").restarts == 1
    (relaunch,) = only(out, Launch)
    assert relaunch.resume_from == "/ckpt/a"
    assert [r.restarts for r in only(out, Restarting)] == [1]
    core.handle(AgentHello("a", relaunch.gen, 40), 2.5)
    core.handle(Failed("a", "agent exited with code 1"), now=3.0)
    assert core.status("a").state is JobState.FAILED  # the cap is reached


def test_a_crash_s_last_word_says_how_far_it_got_and_measures_nothing() -> None:
    # A script that raises within its first heartbeat's second made progress all the same:
    # its SDK says the step it reached as it exits, and the job is relaunched.
    core = scheduler(cpu_workers=12)
    (launch,) = only(core.handle(JobSubmitted(replace(job("a"), max_restarts=1)), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    core.handle(Heartbeat.last_word("a", launch.gen, 5), now=0.8)
    status = core.status("a")
    assert status.measured_samples_per_s is None, "the last word is not a measurement"
    out = core.handle(Failed("a", "exited with code 1"), now=1.3)
    assert [r.restarts for r in only(out, Restarting)] == [1]
    # Without it, a crash before the first heartbeat is not relaunched.
    core = scheduler(cpu_workers=12)
    (launch,) = only(core.handle(JobSubmitted(replace(job("b"), max_restarts=1)), 0.0), Launch)
    core.handle(AgentHello("b", launch.gen, 0), 0.0)
    out = core.handle(Failed("b", "exited with code 1"), now=0.5)
    assert core.status("b").state is JobState.FAILED and not only(out, Restarting)


def test_relaunches_back_off_doubling_up_to_the_cap() -> None:
    core = scheduler(restart_backoff_s=10.0)
    request = replace(job("a"), max_restarts=9)
    (launch,) = only(core.handle(JobSubmitted(request), 0.0), Launch)
    now, waits = 0.0, []
    for attempt in range(1, 7):
        core.handle(AgentHello("a", launch.gen, 10 * attempt - 10), now)
        core.handle(Heartbeat("a", launch.gen, 10 * attempt, 100.0, 0.0, 2), now)
        assert not only(core.handle(Failed("a", "exited with code 1"), now), Launch)
        assert core.status("a").state is JobState.SUBMITTED
        failed_at, due = now, core.next_deadline()
        assert due is not None
        assert not only(core.handle(Tick(), due - 0.01), Launch), "not before its back-off"
        (launch,) = only(core.handle(Tick(), due), Launch)
        waits.append(due - failed_at)
        now = due + 1.0
    assert waits == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0]


def test_restarts_used_before_a_daemon_restart_count_against_the_cap() -> None:
    core = scheduler(cpu_workers=12)
    request = replace(job("a"), max_restarts=1, restarts=1)
    (launch,) = only(core.handle(JobSubmitted(request), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    core.handle(Failed("a", "agent exited with code 1"), now=1.0)
    assert core.status("a").state is JobState.FAILED
    adopted = replace(job("b"), max_restarts=1, restarts=1)
    core.handle(Reattached(adopted, Allocation(2), iteration=10), 1.0)
    core.handle(Failed("b", "agent exited with code 1"), now=2.0)
    assert core.status("b").state is JobState.FAILED


def test_a_command_without_the_sdk_runs_unmanaged_and_is_planned_around() -> None:
    core = Scheduler(
        NodeSpec(cpu_workers=12, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(
            policy="optimal", arrival_window_s=0.0, completion_window_s=0.0, unmanaged_after_s=5.0
        ),
    )
    plain = replace(job("plain"), command=True, max_restarts=3)
    (launch,) = only(core.handle(JobSubmitted(plain), 0.0), Launch)
    assert core.next_deadline() == 5.0, "a command's hello is awaited unmanaged_after_s"
    assert core.waiting("plain", 2.0) == Waiting(
        WaitReason.SDK_HELLO, seconds_left=3.0, setting_s=5.0
    )
    out = core.handle(Tick(), 5.0)
    (moved,) = only(out, StateChanged)
    assert moved.new is JobState.RUNNING and moved.reason is StateReason.RAN_UNMANAGED
    assert only(out, RanUnmanaged) == [RanUnmanaged("plain")], "kept for a restarted daemon"
    assert core.status("plain").unmanaged
    assert core.waiting("plain", 5.0) is None
    assert core.next_deadline() is None, "no heartbeat is awaited from it"
    out = core.handle(Tick(), 60.0)
    assert core.status("plain").state is JobState.RUNNING, "silence is not its death"
    # A second job is planned on what `plain` leaves; `plain` is never asked to pause.
    out = core.handle(JobSubmitted(job("b")), 61.0)
    assert not only(out, Pause)
    (second,) = only(out, Launch)
    # A job of the SDK's: its hello is all it waits for.
    assert core.waiting("b", 61.0) == Waiting(WaitReason.HELLO, seconds_left=120.0, setting_s=120.0)
    held = launch.allocation.workers_per_gpu
    assert held + second.allocation.workers_per_gpu <= 12
    assert core.loader_processes() == held + second.allocation.workers_per_gpu
    # It fails: without progress reports it cannot be judged to have progressed.
    core.handle(Failed("plain", "exited with code 1"), 70.0)
    assert core.status("plain").state is JobState.FAILED


def test_a_slow_command_that_says_hello_late_becomes_managed() -> None:
    core = scheduler()
    slow = replace(job("slow"), command=True)
    (launch,) = only(core.handle(JobSubmitted(slow), 0.0), Launch)
    assert only(core.handle(Tick(), 31.0), RanUnmanaged) == [RanUnmanaged("slow")]
    assert core.status("slow").unmanaged
    said = core.handle(AgentHello("slow", launch.gen, 0), 40.0)
    assert not core.status("slow").unmanaged
    assert only(said, RanUnmanaged) == [RanUnmanaged("slow", unmanaged=False)], "and undone"
    (pause,) = only(core.handle(JobSubmitted(job("b")), 41.0), Pause)
    assert pause.job_id == "slow", "planned again: it can be resized now"


def test_a_job_whose_loader_cannot_resize_is_planned_around_never_paused() -> None:
    core = scheduler()
    (launch,) = only(core.handle(JobSubmitted(job("stream")), 0.0), Launch)
    core.handle(AgentHello("stream", launch.gen, 0), 0.5)
    core.handle(AgentHello("stream", launch.gen, 0, resizable=False), 1.0)  # its loader
    held = launch.allocation.workers_per_gpu
    out = core.handle(JobSubmitted(job("b")), 2.0)
    assert not only(out, Pause), "it cannot change its workers: it is not asked to"
    (second,) = only(out, Launch)
    assert held + second.allocation.workers_per_gpu <= 12
    core.handle(Heartbeat("stream", launch.gen, 10, 100.0, 0.0, held), 2.5)
    assert core.status("stream").state is JobState.RUNNING


def test_a_relaunch_of_a_job_that_could_not_resize_is_launched_again() -> None:
    core = scheduler()
    request = replace(job("stream"), max_restarts=1)
    (launch,) = only(core.handle(JobSubmitted(request), 0.0), Launch)
    core.handle(AgentHello("stream", launch.gen, 0, resizable=False), 0.5)
    core.handle(Heartbeat("stream", launch.gen, 10, 100.0, 0.0, 4), 1.0)
    out = core.handle(Failed("stream", "agent exited with code -9"), now=2.0)
    (relaunch,) = only(out, Launch)  # window 0, no back-off: at once, as any job
    assert relaunch.job_id == "stream"
    assert core.status("stream").state is JobState.STARTING


def test_a_launched_agent_that_never_says_hello_is_lost() -> None:
    core = Scheduler(
        NodeSpec(cpu_workers=12, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(arrival_window_s=0.0, launch_timeout_s=30.0),
    )
    only(core.handle(JobSubmitted(job("mute")), 0.0), Launch)
    assert core.next_deadline() == 30.0
    core.handle(Tick(), 29.0)
    assert core.status("mute").state is JobState.STARTING
    core.handle(Tick(), 30.0)
    assert core.status("mute").state is JobState.FAILED


def test_cancel_while_pausing_lets_the_round_finish() -> None:
    core = scheduler(cpu_workers=12)
    start(core, "a", 0.0)
    core.handle(JobSubmitted(job("b")), now=1.0)
    out = core.handle(JobCancelled("a"), now=2.0)
    assert only(out, Cancel) == [Cancel("a")]
    assert [launch.job_id for launch in only(out, Launch)] == ["b"]
    assert core.status("a").state is JobState.CANCELLED


def test_a_job_cancelled_before_its_hello_is_told_again_when_it_says_hello() -> None:
    core = scheduler()
    (launch,) = only(core.handle(JobSubmitted(job("a")), now=0.0), Launch)
    assert only(core.handle(JobCancelled("a", exited=False), now=1.0), Cancel) == [Cancel("a")]
    # That cancel found no agent to tell (none had connected): its hello is the first word.
    out = core.handle(AgentHello("a", launch.gen, 0), now=2.0)
    assert only(out, Cancel) == [Cancel("a")], "it checkpoints and leaves"
    assert core.status("a").state is JobState.CANCELLED
    core.handle(Exited("a"), now=3.0)
    assert only(core.handle(AgentHello("a", launch.gen, 0), now=4.0), Cancel) == [], "gone"


def test_cancel_before_the_window_closes_drops_the_arrival() -> None:
    core = scheduler(window_s=30.0)
    core.handle(JobSubmitted(job("a")), now=0.0)
    out = core.handle(JobCancelled("a"), now=1.0)
    assert only(out, Cancel) == []  # nothing ran
    assert only(core.handle(Tick(), now=31.0), Launch) == []


def test_messages_about_ended_jobs_do_not_crash_and_are_recorded() -> None:
    core = scheduler()
    start(core, "a", 0.0)
    core.handle(Finished("a"), now=5.0)
    assert only(core.handle(Finished("a"), now=6.0), StaleMessage)
    assert only(core.handle(Failed("a", "late"), now=6.0), StaleMessage)
    assert only(core.handle(Heartbeat("a", 1, 3, 1.0, 0.0, 1), now=6.0), StaleMessage)


def test_unknown_and_duplicate_jobs_are_refused() -> None:
    core = scheduler()
    with pytest.raises(UnknownJob):
        core.handle(Finished("ghost"), now=0.0)
    core.handle(JobSubmitted(job("a")), now=0.0)
    with pytest.raises(SchedulerError):
        core.handle(JobSubmitted(job("a")), now=1.0)


def test_every_command_carries_the_current_generation() -> None:
    core = scheduler(cpu_workers=12)
    start(core, "a", 0.0)
    out = core.handle(JobSubmitted(job("b")), now=1.0)
    out += core.handle(Paused("a", 2, 0), now=2.0)
    gens = {c.gen for c in out if isinstance(c, Launch | Pause | Resume)}
    assert gens == {core.generation} == {2}


def test_a_closing_window_serves_both_buffers() -> None:
    core = scheduler(cpu_workers=12, window_s=30.0, completion_window_s=5.0)
    core.handle(JobSubmitted(job("a")), now=0.0)
    core.handle(Tick(), now=30.0)
    core.handle(AgentHello("a", 1, 0), now=31.0)
    core.handle(Finished("a"), now=40.0)
    core.handle(JobSubmitted(job("b")), now=41.0)  # its own window would close at 71
    launches = only(core.handle(Tick(), now=45.0), Launch)
    assert [launch.job_id for launch in launches] == ["b"]


def test_windows_closing_during_a_round_wait_for_it_without_a_busy_deadline() -> None:
    core = scheduler(cpu_workers=12, pause_timeout_s=60.0)
    start(core, "a", 0.0)
    core.handle(JobSubmitted(job("b")), now=5.0)  # a round: a is told to pause
    core.handle(JobSubmitted(job("c")), now=6.0)  # window 0: due now, but a round runs
    # The next deadline is the round's pause timeout, not the arrival already due.
    assert core.next_deadline() == pytest.approx(65.0)
    out = core.handle(Paused("a", 2, 10), now=7.0)
    # The round ends (b launches, a resumes), then c's round follows at once.
    launches = {launch.job_id: launch.gen for launch in only(out, Launch)}
    assert launches == {"b": 2, "c": 3}


def test_a_finish_during_a_round_gives_its_processes_to_the_round_s_jobs() -> None:
    # Measured live (bench_live_gain, 2026-11-26): a job ended while the others paused. They
    # resumed without its processes, and the round after paused them again to hand them on.
    core = scheduler(cpu_workers=12, window_s=0.0, completion_window_s=2.0)
    start(core, "a", 0.0)
    start_second(core, "a", "b", 0.5)
    assert only(core.handle(JobSubmitted(job("c")), now=10.0), Pause) == [
        Pause("a", 3),
        Pause("b", 3),
    ]
    core.handle(Finished("b"), now=10.1)  # while pausing
    out = core.handle(Paused("a", 3, 0), now=10.2)
    (replanned,) = only(out, Replanned)
    (launch,) = only(out, Launch)
    (resume,) = only(out, Resume)
    assert set(replanned.plan.allocations) == {"a", "c"}
    assert launch.allocation.workers_per_gpu + resume.allocation.workers_per_gpu == 12, "b's too"
    # The window closes while a resumes and c starts: nothing to plan yet, and no deadline
    # left in the past to spin on.
    assert core.handle(Tick(), now=12.2) == []
    deadline = core.next_deadline()
    assert deadline is not None and deadline > 12.2
    core.handle(AgentHello("c", 3, 0), now=12.5)
    out = core.handle(Resumed("a", 3, resume.allocation.workers_per_gpu, 0.5), now=13.0)
    assert only(out, Pause) == [], "the finish was served: the jobs that just moved stay"
    assert workers(core, "a") + workers(core, "c") == 12


def resize_for_c(core: Scheduler, now: float) -> tuple[Launch, Resume, Resume]:
    """a and b run; c arrives, a and b pause, and the round ends: c launches, a and b
    resume (each told, none answered yet)."""
    start(core, "a", 0.0)
    start_second(core, "a", "b", 0.5)
    assert only(core.handle(JobSubmitted(job("c")), now), Pause) == [Pause("a", 3), Pause("b", 3)]
    core.handle(Paused("a", 3, 0), now + 0.1)
    out = core.handle(Paused("b", 3, 0), now + 0.2)
    (launch,) = only(out, Launch)
    resume_a, resume_b = only(out, Resume)
    return launch, resume_a, resume_b


def test_a_finish_after_a_round_is_served_once_the_round_s_jobs_run() -> None:
    # Measured live (bench_live_gain, 2026-11-26): a job ended while the others were still
    # resuming, its window closed before they ran, and its processes stayed idle to the end.
    core = scheduler(cpu_workers=12, window_s=0.0, completion_window_s=2.0)
    launch, resume_a, resume_b = resize_for_c(core, 10.0)
    core.handle(Resumed("a", 3, resume_a.allocation.workers_per_gpu, 0.5), now=10.3)
    core.handle(Finished("a"), now=10.4)
    assert core.next_deadline() == pytest.approx(12.4)
    # The window closes while b resumes and c starts: nothing to plan yet, and no deadline
    # left in the past to spin on.
    assert core.handle(Tick(), now=12.5) == []
    deadline = core.next_deadline()
    assert deadline is not None and deadline > 12.5
    assert only(core.handle(AgentHello("c", 3, 0), now=12.6), Pause) == [], "b still resuming"
    out = core.handle(Resumed("b", 3, resume_b.allocation.workers_per_gpu, 0.5), now=13.0)
    assert only(out, Pause) == [Pause("b", 4), Pause("c", 4)], "the finish is served now"
    used = launch.allocation.workers_per_gpu + resume_b.allocation.workers_per_gpu
    out = core.handle(Paused("b", 4, 0), now=13.5) + core.handle(Paused("c", 4, 0), now=13.6)
    assert sum(r.allocation.workers_per_gpu for r in only(out, Resume)) > used


def test_a_held_round_waits_no_longer_than_a_round_waits_for_its_pauses() -> None:
    core = scheduler(cpu_workers=12, window_s=0.0, completion_window_s=2.0, pause_timeout_s=20.0)
    launch, resume_a, _ = resize_for_c(core, 10.0)
    core.handle(Resumed("a", 3, resume_a.allocation.workers_per_gpu, 0.5), now=10.3)
    core.handle(Finished("a"), now=10.4)
    assert core.handle(Tick(), now=12.4) == [], "held: b resuming, c starting"
    assert core.next_deadline() == pytest.approx(32.4), "no longer than pause_timeout_s"
    assert only(core.handle(AgentHello("c", 3, 0), now=13.0), Pause) == [], "b still resuming"
    for now in (20.0, 30.0):  # c runs and says so; b never reports its resume
        core.handle(Heartbeat("c", 3, 10, 100.0, 0.0, launch.allocation.workers_per_gpu), now)
    assert only(core.handle(Tick(), now=32.4), Pause) == [Pause("c", 4)], "planned without b"


def test_optimal_gives_equally_useful_workers_to_the_job_with_more_work_left() -> None:
    # Two loader-bound jobs alike but for their length, 6 spare processes: every split
    # predicts the same total, and the core tells optimal the work left to break the tie.
    core = scheduler(cpu_workers=8, policy="optimal", window_s=30.0)
    core.handle(JobSubmitted(job("short", iterations=1_000)), now=0.0)
    core.handle(JobSubmitted(job("long", iterations=3_000)), now=0.0)
    launches = only(core.handle(Tick(), now=30.0), Launch)
    split = {launch.job_id: launch.allocation.workers_per_gpu for launch in launches}
    assert split == {"short": 2, "long": 6}


def test_a_new_model_repredicts_live_jobs_for_the_next_round() -> None:
    node = NodeSpec(cpu_workers=64, contention=ContentionCurve.contention_free())
    # `optimal`: formula 5's hard knee, so the workers that just feed the GPU are exact.
    config = SchedulerConfig(policy="optimal", arrival_window_s=0.0)
    core = Scheduler(node, RateModel(FlatModel(0.1)), config)
    predicted = replace(job("a"), step_time_s=None, sample_cost_s=None, flops=1e9)
    (launch,) = only(core.handle(JobSubmitted(predicted), 0.0), Launch)
    assert launch.allocation.workers_per_gpu == 10  # 100 * 0.01 / 0.1
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    core.handle(ModelRefitted(RateModel(FlatModel(0.05)), node), 0.0)  # the GPU is twice as fast
    assert core.status("a").allocation == launch.allocation  # nothing changes until a round
    out = core.handle(JobSubmitted(job("b", step_time_s=1.0)), 1.0)
    (pause,) = only(out, Pause)
    (resume,) = only(core.handle(Paused("a", pause.gen, 5), 1.5), Resume)
    assert resume.allocation.workers_per_gpu == 20  # 100 * 0.01 / 0.05


def test_a_refit_below_the_r2_threshold_is_refused_and_one_above_is_taken() -> None:
    node = NodeSpec(cpu_workers=64, contention=ContentionCurve.contention_free())
    config = SchedulerConfig(policy="optimal", arrival_window_s=0.0, min_refit_r2=0.6)
    core = Scheduler(node, RateModel(FlatModel(0.1)), config)
    predicted = replace(job("a"), step_time_s=None, sample_cost_s=None, flops=1e9)
    (launch,) = only(core.handle(JobSubmitted(predicted), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    faster = RateModel(FlatModel(0.05))
    with pytest.raises(RefitUntrusted, match=r"training model's held-out R\^2 0\.300 is below"):
        core.handle(ModelRefitted(faster, node, FitQuality(training_r2=0.3, loading_r2=0.9)), 0.0)
    with pytest.raises(RefitUntrusted, match=r"loading model's .* could not be measured"):
        core.handle(ModelRefitted(faster, node, FitQuality(training_r2=0.9, loading_r2=None)), 0.0)
    out = core.handle(JobSubmitted(job("b", step_time_s=1.0)), 1.0)
    assert not [command for command in out if isinstance(command, Pause)], "a keeps its 10"
    core.handle(ModelRefitted(faster, node, FitQuality(training_r2=0.6, loading_r2=0.95)), 0.0)
    (pause,) = only(core.handle(JobSubmitted(job("c", step_time_s=1.0)), 2.0), Pause)
    (resume,) = only(core.handle(Paused("a", pause.gen, 5), 2.5), Resume)
    assert resume.allocation.workers_per_gpu == 20, "planned with the refit taken"


def test_an_adopted_job_runs_on_and_is_planned_with_the_next_arrival() -> None:
    core = scheduler(cpu_workers=12)
    out = core.handle(Reattached(job("old"), Allocation(7), iteration=500), 0.0)
    assert [r.new for r in only(out, StateChanged)] == [JobState.RUNNING]
    assert core.status("old").state is JobState.RUNNING and workers(core, "old") == 7
    with pytest.raises(SchedulerError):
        core.handle(Reattached(job("old"), Allocation(7), iteration=500), 0.0)
    out = core.handle(JobSubmitted(job("new")), 1.0)
    (pause,) = only(out, Pause)  # 7 + 10 > 12: the adopted job shrinks for the newcomer
    assert pause.job_id == "old"
    core.handle(Tick(), 5.0)
    assert core.status("old").state is JobState.PAUSING  # heartbeats are still expected


def test_a_share_only_change_goes_out_live_without_a_pause() -> None:
    # Two GPU-bound jobs (300 samples/s each) that decode 25 x cheaper on the device: alone,
    # `a` takes the whole decoder; when `b` arrives they split it, and `a` keeps its one
    # worker and its mode, so its new share is sent live.
    core = Scheduler(
        NodeSpec(cpu_workers=4, decoder_capacity=1000.0),
        RateModel(),
        SchedulerConfig(policy="joint", arrival_window_s=0.0, completion_window_s=0.0),
    )

    def device_job(job_id: str) -> JobRequest:
        return replace(job(job_id, batch_size=30, sample_cost_s=0.05), device_sample_cost_s=0.002)

    (launch,) = only(core.handle(JobSubmitted(device_job("a")), 0.0), Launch)
    assert launch.allocation == Allocation(1, 1.0, "device")
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    out = core.handle(JobSubmitted(device_job("b")), 1.0)
    assert only(out, Pause) == []
    (share,) = only(out, SetShare)
    assert share.job_id == "a"
    assert share.decoder_share == pytest.approx(0.5)
    (launch_b,) = only(out, Launch)
    assert launch_b.allocation == Allocation(1, share.decoder_share, "device")
    status = core.status("a")
    assert status.allocation == Allocation(1, share.decoder_share, "device")
    assert status.state is JobState.RUNNING


def test_shares_of_jobs_still_starting_are_not_planned_twice() -> None:
    core = Scheduler(
        NodeSpec(cpu_workers=4, decoder_capacity=1000.0),
        RateModel(),
        SchedulerConfig(policy="joint", arrival_window_s=0.0, completion_window_s=0.0),
    )
    request = replace(job("a", batch_size=30, sample_cost_s=0.05), device_sample_cost_s=0.002)
    (launch,) = only(core.handle(JobSubmitted(request), 0.0), Launch)
    assert launch.allocation.decoder_share == 1.0
    # `a` has not said hello: its share is held, so `b` is planned without the decoder.
    out = core.handle(JobSubmitted(replace(request, id="b")), 1.0)
    (launch_b,) = only(out, Launch)
    assert launch_b.allocation.decode_mode == "cpu"
    assert launch_b.allocation.decoder_share == 0.0


def test_a_replan_after_a_pause_timeout_plans_as_a_round_does() -> None:
    # `s` must shrink for `p` and `q` but never pauses. At the timeout `s` keeps its 10
    # workers and `p` and `q` are planned on the 8 left, with the configured fairness floor
    # (0.7: `p` may drop to 3 workers, 300 of its balance 400 samples/s, so `q` reaches its
    # peak with 5). The replan once planned bare specs at the default floor of 0.8: 4 and 4.
    core = Scheduler(
        NodeSpec(cpu_workers=18, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(
            policy="fair", arrival_window_s=1.0, completion_window_s=1.0, gate=False,
            pause_timeout_s=20.0, fair_floor=0.7, start_when_free=False,
        ),
    )  # fmt: skip
    core.handle(JobSubmitted(job("s")), 0.0)
    (launch,) = only(core.handle(Tick(), 1.0), Launch)
    core.handle(AgentHello("s", launch.gen, 0), 1.0)
    assert workers(core, "s") == 10
    core.handle(JobSubmitted(job("p")), 2.0)
    core.handle(JobSubmitted(job("q", sample_cost_s=0.005)), 2.0)
    out = core.handle(Tick(), 3.0)
    assert [pause.job_id for pause in only(out, Pause)] == ["s"]
    core.handle(Heartbeat("s", launch.gen, 20, 100.0, 0.0, 10), 10.0)
    out = core.handle(Tick(), 23.0)  # the pause timed out: `s` keeps its 10
    assert workers(core, "s") == 10
    (replanned,) = only(out, Replanned)
    launched = {launch.job_id: launch.allocation.workers_per_gpu for launch in only(out, Launch)}
    assert launched == {"p": 3, "q": 5}
    assert {job_id: a.workers_per_gpu for job_id, a in replanned.plan.allocations.items()} == {
        "p": 3,
        "q": 5,
    }
