"""Which checkpoint a run goes on from, and the refusals: its own newest, unless, without
a daemon, that is a finished run's (put aside in `finished/`: a new run in the folder
starts afresh, as a plain PyTorch script would); else, for a job that continues an ended
one (`stoker resume`, STOKER_CONTINUE_FROM), that one's newest. A run without a daemon
refuses another script's checkpoint rather than load that model into its own. A loader's
saved position carries over only to data of the length it was drawn for.

`Say` is how these tell the script's user what they chose: a line on rank 0's stderr
(`JobEnvironment.say`, without its "to start afresh" hint).
"""

from collections.abc import Sized
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from agents import checkpointformat, checkpoints
from agents.environment import JobEnvironment, Say
from agents.loader import Position


def start_from(environment: JobEnvironment, say: Say) -> tuple[Path | None, dict[str, Any] | None]:
    """The checkpoint this run goes on from, and what it holds: the newest of its own,
    unless, without a daemon, that is a finished run's (a new run in the folder starts
    afresh, as a plain PyTorch script would; the finished one is kept in `finished/`,
    which STOKER_CONTINUE_FROM trains on from); else, for a job that continues an ended
    one, that one's newest. A run without a daemon refuses another script's checkpoint
    rather than load that model into its own."""
    own = environment.checkpoint_dir
    newest = checkpoints.latest(own)
    state = checkpointformat.read(newest) if newest is not None else None
    alone = environment.job_id is None and environment.continue_from is None
    if newest is not None and state is not None and state.get("final") and alone:
        kept = put_aside(newest, own / "finished")
        say(
            f"{newest} is the final checkpoint of a finished run: kept as {kept}, and this"
            f" run starts afresh (STOKER_CONTINUE_FROM={kept.parent} trains on from it)"
        )
        newest = state = None
    if newest is None and environment.continue_from is not None:
        # A job that goes on from an ended one's checkpoint, read as this job's user:
        # its own checkpoints, once it has any, come first (a relaunch goes on from them).
        newest = checkpoints.latest(environment.continue_from)
        if newest is None:
            raise FileNotFoundError(
                f"STOKER_CONTINUE_FROM: no checkpoint in {environment.continue_from} to"
                " go on from (removed since the submit?); submit the job afresh"
            )
        state = checkpointformat.read(newest)
    script = state.get("script") if state is not None else None
    if environment.job_id is None and script and script != checkpointformat.script():
        fix = (
            "point STOKER_CONTINUE_FROM at this script's checkpoints"
            if newest is not None and newest.parent != own
            else f"give this script a folder of its own (stoker.init(output_dir=...) or"
            f" STOKER_OUTPUT_DIR), or remove {own} to start it afresh"
        )
        raise RuntimeError(
            f"stoker: {newest} is a checkpoint of {script}, not of this script"
            f" ({checkpointformat.script()}): {fix}"
        )
    return newest, state


def put_aside(path: Path, folder: Path) -> Path:
    """Move a finished run's final checkpoint into `folder`, in place of the one there,
    out of the way of the next run's (only the newest two are kept); its earlier ones,
    beside it, go: a later run must not go on from one of them."""
    folder.mkdir(mode=0o700, exist_ok=True)
    for older in folder.glob("checkpoint-*.pt"):
        older.unlink()
    kept = folder / path.name
    path.replace(kept)
    for earlier in checkpoints.checkpoint_files(path.parent):
        earlier.unlink()
    return kept


def carried(saved: Position, dataset: Dataset[Any], say: Say) -> Position:
    """A checkpoint's loader position over `dataset`: as saved, unless the dataset's
    length is not the one the saved epoch's order was drawn for (a job continued on
    other data): then that epoch starts again from its first sample, as said."""
    length = len(dataset) if isinstance(dataset, Sized) else None
    if not saved.samples or length is None or length == saved.samples or not saved.consumed:
        return saved
    say(
        f"the checkpoint's loader had {saved.samples:,} samples and this dataset has"
        f" {length:,}: its place in epoch {saved.epoch} ({saved.consumed:,} consumed) does"
        f" not carry over, so epoch {saved.epoch} starts again from its first sample"
    )
    return Position(saved.epoch, 0, saved.seed, length)
