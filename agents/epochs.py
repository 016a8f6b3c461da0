"""The job's epochs (`job.epochs(n)`): the epoch it is in, carried over restarts; the
boundary between two epochs, after the script's own end of an epoch (the loaders leave
their last batch's to it), where a stop goes on with the next epoch; the final checkpoint
when they are done; and the step the job will have reached then, which the heartbeat
tells the daemon (`planned_iterations`).
"""

from collections.abc import Iterator

from agents.boundary import BatchBoundaries
from agents.jobloaders import JobLoaders


class Epochs:
    """Where a job is in its epochs, and how many its script asked for."""

    def __init__(self, run: BatchBoundaries, loaders: JobLoaders) -> None:
        self._run, self._loaders = run, loaders
        self.epoch = 0
        self.finished = 0  # epochs this run finished: a loader made after one is late
        self.asked = 0  # the `count` of the running `job.epochs(count)`; 0: none runs
        # Steps of the last whole epoch this run trained (every loader's batches, an
        # evaluation's too), and the step the current epoch began at: `planned_iterations`.
        self._epoch_steps: int | None = None
        self._began = 0

    @property
    def running(self) -> bool:
        """Whether `job.epochs(n)` is running: its passes are epochs'."""
        return bool(self.asked) and not self._run.trained

    def run(self, count: int, resumed: bool) -> Iterator[int]:
        """`Job.epochs(count)`; `resumed`: the job goes on from a checkpoint."""
        self._run.trained = False  # a second training phase stops at its boundaries again
        self._run.final = False
        self.asked = count
        if self._run.control is not None:
            self._run.control.planned_iterations = self.planned_iterations
        if resumed and self.epoch >= count:
            self._run.say(f"epoch {self.epoch} of {count}: nothing left to train", afresh=False)
        primary = self._loaders.primary
        whole = primary is not None and primary.position.consumed == 0
        while self.epoch < count:
            epoch = self.epoch
            self._began = self._run.step
            yield epoch
            if whole:  # it began at its start (a resumed one did not): count its steps
                self._epoch_steps = self._run.step - self._began
            whole = True
            self.finished += 1
            primary = self._loaders.primary
            if primary is not None and primary.position.epoch > epoch:
                self.epoch = primary.position.epoch
            else:  # a custom loop, or one that left its loader early: the epoch ends here
                self.epoch = epoch + 1
                if primary is not None:
                    primary.position.epoch, primary.position.consumed = self.epoch, 0
            self._began = self._run.step  # the next one's: a heartbeat at this boundary
            if self.epoch < count:
                self._run.at_boundary()
        self._run.finish()

    def planned_iterations(self) -> int:
        """`Job.planned_iterations`."""
        count = self.asked
        if not count:
            return 0
        if self._epoch_steps is not None:
            planned = self._began + (count - self.epoch) * self._epoch_steps
            return max(planned, self._run.step)
        primary = self._loaders.primary
        left = primary.batches_until(count) if primary is not None else None
        return 0 if left is None else self._run.step + left
