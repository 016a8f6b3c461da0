"""A job as submitted to the core (`JobRequest`) and the pipeline names it loads with: the
one description of a job that events carry in and the throughput model predicts from. Kept
apart from the events and commands so that `scheduler/rates.py` and admission can use it
below them."""

from dataclasses import dataclass

DEFAULT_PIPELINE = "imagenet"  # what jobs load with unless they say


def device_pipeline(pipeline: str) -> str:
    """The TPM's id for `pipeline` with decoding done by the decoder device (augment only)."""
    return f"{pipeline}+device"


@dataclass(frozen=True)
class JobRequest:
    """A job as submitted: what it trains and the features the TPM predicts its rates from.

    `step_time_s` and `sample_cost_s` may be given to bypass the TPM (profiled elsewhere).
    """

    id: str
    gpus: int
    batch_size: int  # global batch B
    iterations: int | None  # None: a command that did not say (its script may, `Heartbeat`)
    model_params: float
    flops: float = 0.0  # forward FLOPs per sample; needed unless step_time_s is given
    pipeline: str = DEFAULT_PIPELINE  # preprocessing pipeline id in the TPM
    step_time_s: float | None = None
    sample_cost_s: float | None = None
    # Augment-only cost when the node's decoder decodes (c'); None: the TPM's fit of the
    # pipeline's device variant (`device_pipeline`), if it has one; else cpu mode only.
    device_sample_cost_s: float | None = None
    # The sharpness of the job's own knee where it is known (a simulation's truth); None:
    # the plan's default.
    knee_sharpness: float | None = None
    max_restarts: int = 0
    restarts: int = 0  # already used: a job restored after the daemon restarted
    # What the user asked for; only the `static` policy honours it (paper Table III).
    workers_per_gpu: int | None = None
    # Pinned GPUs (or CPU training slots); None: the least loaded ones at admission.
    gpu_indices: tuple[int, ...] | None = None
    # A user's command, which may not use the SDK: if it never says hello it runs on
    # unmanaged (SchedulerConfig.unmanaged_after_s) instead of being lost.
    command: bool = False
    # Whose job it is: admission shares the node among tenants by weight (admission.py).
    tenant: str = ""
    # It resizes in place (the SDK's hot resize): a pause costs it its loaders' rebuild,
    # not a restart from its checkpoint.
    hot_resize: bool = False
    # Its own limits (None: the config's; for time_limit_s, none): link silence before it is
    # lost, no progress (a step, a new phase) before it is stalled, run time before it stops.
    heartbeat_timeout_s: float | None = None
    stall_timeout_s: float | None = None
    time_limit_s: float | None = None
    # The seconds since its first start, when an earlier daemon started it (a job restored
    # after a restart): its time limit counts them.
    ran_before_s: float = 0.0
    # Where it goes on from when launched: a restored job's newest checkpoint ("": the
    # start); its launches name it (`Launch.resume_from`) until it pauses with a newer one.
    checkpoint: str = ""
