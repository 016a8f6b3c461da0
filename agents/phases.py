"""What a job is doing when it is not consuming batches: its phase (`job.phase(...)`).

The daemon shows a job's phase and never takes a long one for a hang: the link's own thread
says the process lives meanwhile (agents/link.py). The SDK says `setup` from `stoker.init()`
to the first training batch, `evaluation` during an evaluation loader's pass and `saving`
while it writes a checkpoint; a script names its own with `job.phase("tokenising")`.
"""

import re
from collections.abc import Callable
from types import TracebackType

from agents.agentmessages import MAX_PHASE, PHASE_PATTERN

_VALID = re.compile(PHASE_PATTERN)


def check_phase(name: str) -> str:
    """`name` if the daemon can show it; ValueError saying what to change otherwise."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_PHASE or not _VALID.match(name):
        raise ValueError(
            f"job.phase({name!r}): a phase is 1 to {MAX_PHASE} characters, letters, digits,"
            " spaces and _.:/- (starting with a letter or digit), e.g. 'tokenising'"
        )
    return name


class PhaseScope:
    """Sets a phase when made; as a context manager, gives back the one before on exit
    (used without `with`, the phase lasts until the next)."""

    def __init__(self, name: str, get: Callable[[], str], put: Callable[[str], None]) -> None:
        self._before = get()
        self._put = put
        put(check_phase(name))

    def __enter__(self) -> "PhaseScope":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._put(self._before)
