"""The reallocation gate on its own: what a change saves a running job against its pause
cost, and which changes give way when the plan does not fit the node as the gate leaves it."""

from allocator import AllocationPlan, JobSpec
from allocator.types import JobAllocation
from scheduler.commands import GateChoice
from scheduler.gate import RunningJob, decide

# Loader-bound jobs of 2 GPUs: each worker adds 100 samples/s per GPU (cost 10 ms a sample),
# up to a GPU's 2,000 samples/s; 10,000 samples left, a pause costs 5 s.
PAUSE_S = 5.0


def running(job_id: str, workers_per_gpu: int, remaining: float = 10_000.0) -> RunningJob:
    spec = JobSpec(
        id=job_id, gpus=2, batch_size=256, model_params=1e6, step_time_s=0.064, sample_cost_s=0.01
    )
    return RunningJob(spec, workers_per_gpu, remaining, PAUSE_S)


def plan(**workers: int) -> AllocationPlan:
    return AllocationPlan(
        policy="optimal",
        allocations={job: JobAllocation(count, 0.0) for job, count in workers.items()},
        loader_processes=sum(2 * count for count in workers.values()),
        cpu_workers=18,
        efficiency=1.0,
        predicted_total_samples_per_s=0.0,
    )


def test_a_running_jobs_gain_never_pauses_others_at_a_greater_loss() -> None:
    # Three jobs split 18 processes 3-3-3; the plan gives b 7 and the others 1. b gains
    # less than a and c would lose: b is held back and nobody pauses.
    decision = decide(
        plan(a=1, b=7, c=1), [running("a", 3), running("b", 3), running("c", 3)], 18, 0.2
    )
    assert decision.kept == {"a", "b", "c"}
    assert decision.verdicts["b"].choice is GateChoice.HELD
    assert decision.verdicts["b"].saved_s > decision.verdicts["b"].needed_s  # it paid alone
    assert str(decision.verdicts["b"]).startswith("held: saves")
    assert {decision.verdicts[j].choice for j in "ac"} == {GateChoice.KEEP}


def test_a_gain_greater_than_the_shrinks_it_needs_is_made() -> None:
    # a has little left, so taking 2 of its 3 workers costs it little; b, with much left,
    # gains more than that: a is forced to shrink and b grows.
    decision = decide(
        plan(a=1, b=5), [running("a", 3, remaining=200.0), running("b", 3, 50_000.0)], 12, 0.2
    )
    assert decision.kept == set()
    assert decision.verdicts["a"].choice is GateChoice.FORCED
    assert decision.verdicts["b"].choice is GateChoice.CHANGE


def test_an_arrivals_share_is_always_made_room_for() -> None:
    # A new job's 6 processes are not the gate's: the running jobs must shrink to 6 each.
    arrival = plan(a=3, b=3, new=3)
    decision = decide(arrival, [running("a", 6), running("b", 6)], 18, 0.2)
    assert decision.kept == set()
    assert {verdict.choice for verdict in decision.verdicts.values()} == {GateChoice.FORCED}
