"""What the API answers about a job: `JobView`, its record joined with what the daemon
knows of it live, and `CurveView`, the curve the scheduler plans it on. Field names are the
ones DESIGN.md's machine-readable contracts fix; the descriptions are the OpenAPI
document's.
"""

from pydantic import BaseModel, Field


class CurveView(BaseModel):
    """The job's curve as the scheduler plans on it: its prior, moved by what its heartbeats
    measured (docs/daemon.md, "learned curves")."""

    step_time_s: float = Field(
        description=(
            "its GPUs' seconds per iteration, loading aside; on a node that trains on its"
            " CPUs, at the share of a core its training thread gets now"
        )
    )
    sample_cost_s: float = Field(
        description=(
            "c: a loader worker's seconds per sample without the node's contention (its"
            " heartbeats' loader_s is that at the contention then)"
        )
    )
    knee_sharpness: float | None = Field(
        description=(
            "how its samples/s bend below its GPUs' rate as workers near it (p of the smooth"
            " knee; lower bends earlier): measured, else the job's or the config's prior;"
            " null when none is known (the policy's default applies)"
        )
    )
    cpu_cost_s: float | None = Field(
        None,
        description=(
            "CPU seconds per sample, its training and loading together, as its heartbeats"
            " measured (protocol v5); null until three did"
        ),
    )
    core_share: float | None = Field(
        None,
        description=(
            "the share of a core its loader workers got when they could run: CPU seconds over"
            " CPU and run-queue seconds (1: a core each; below on contended CPUs); null until"
            " three heartbeats measured it"
        ),
    )
    overhead_s: float = Field(
        0.0,
        description=(
            "seconds per sample it waits whatever its workers: for the first batch of each"
            " pass (epoch or resize: workers starting, the pipeline filling), and where its"
            " workers have plenty to spare, to take each batch over; 0 until measured"
            " (protocol v6)"
        ),
    )


class JobView(BaseModel):
    id: str
    name: str
    tenant: str
    state: str
    model: str | None
    command: list[str] | None
    workdir: str | None = Field(None, description="the folder its command runs in")
    env_names: list[str] = Field(
        default_factory=list,
        description="the names of the variables its submit gave its command (their values,"
        " which may be secrets, stay with the job)",
    )
    continue_from: str | None = Field(
        None, description="the ended job whose newest checkpoint it started from"
    )
    lineage: list[str] = Field(
        default_factory=list,
        description="its history, oldest first: the jobs it goes on from (`stoker resume`,"
        " continue_from) and itself; its metrics are one series across them",
    )
    gpus: int
    batch_size: int
    iterations: int | None = Field(
        description=(
            "the iteration it ends at: its job file's `iterations`, else what its script's"
            " `job.epochs(n)` and first loader make (known once it trains); null: not known"
        )
    )
    iteration: int
    script_batch_size: int | None = Field(
        None,
        description=(
            "the samples a step of its script takes, all ranks, as its heartbeats say (the"
            " planner counts its work in them); null until they have said. A command's"
            " `batch_size` is only the planner's hint before that"
        ),
    )
    seconds_left: float | None = Field(
        None,
        description=(
            "while it runs: seconds to `iterations` at the pace of its last minute of"
            " heartbeats, as of the newest; null before it has 5 s of them"
        ),
    )
    gpu_indices: list[int]
    workers_per_gpu: int | None
    planned_workers_per_gpu: int | None = Field(
        None,
        description=(
            "the workers per GPU a round gave it that its agent has not taken up yet: a job"
            " launched, until its hello; one told to pause and resize, until it has resumed"
        ),
    )
    predicted_samples_per_s: float | None = Field(
        description="what the plan predicted for the job at its allocation"
    )
    measured_samples_per_s: float | None = Field(description="its newest heartbeat's rate")
    prediction_error: float | None = Field(
        None, description="measured / predicted - 1 (0.1: 10 % faster than predicted)"
    )
    curve: CurveView | None = Field(
        None, description="null for a job this daemon has not planned since it started"
    )
    pause_cost_s: float | None = Field(
        None,
        description=(
            "what a pause costs it as the plans weigh it: as its own pauses measured, else the"
            " median of what pauses of its kind (resized in place, or restarted) measured on"
            " this node, else scheduler.hot_pause_cost_s or default_pause_cost_s; null for a"
            " job this daemon has not planned since it started"
        ),
    )
    unmanaged: bool = Field(
        False,
        description="a command running without the stoker SDK: its workers never change and"
        " nothing of it is measured",
    )
    phase: str = Field(
        "",
        description="while it runs: what its script says it is doing: setup (from"
        " stoker.init() to its first training batch), training, evaluation (an evaluation"
        " loader's pass), saving (a checkpoint), or a phase of the script's own"
        " (job.phase(...)); empty when not said (a script without the SDK, or an older SDK)",
    )
    stalled: bool = Field(
        False,
        description="it runs, but made no step and entered no new phase for its stall limit"
        " (stall_timeout_s); the daemon's scheduler.stall_action says what follows",
    )
    exiting: bool = Field(
        False,
        description="it ended, and its processes run on (a script's work after its final step,"
        " or a cancelled, failed or lost job stopping): its GPUs stay its own until they exit",
    )
    exit_code: int | None = Field(
        None,
        description="once it has ended and its processes have exited: how they exited (0, the"
        " first failed rank's code, or minus the signal that ended it); null before, or when"
        " no daemon saw them exit (a process an earlier daemon started)",
    )
    failed_after_end: bool = Field(
        False,
        description="a completed job whose script failed after its final step (its save, its"
        " evaluation) or overran `finished_exit_s`: its training is done, its work is not;"
        " `reason` says what happened (a cancel of that work is no failure)",
    )
    restarts: int
    submitted_at: float
    started_at: float | None = Field(
        None, description="when it was first launched (seconds since the epoch); null: never"
    )
    ended_at: float | None = Field(
        None, description="when it reached its final state; null: it has not"
    )
    job_dir: str | None = Field(
        None,
        description="the job's folder on the node: its logs, `output/` (the SDK's"
        " `job.output_dir`, where its script may save) and `checkpoints/`",
    )
    reason: str = Field(
        "", description="why it is in its state: for a failed job, its exit code and stderr tail"
    )
