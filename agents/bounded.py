"""The bounded numbers of the agent protocol (agents/protocol.py): each field a job's
process sends has a physical range (allocator/bounds.py), and no float may be infinite or
NaN, so that a message with an absurd number is refused at the edge, naming its field,
before the daemon weighs it (issue 37, finding 1)."""

from typing import Annotated

from pydantic import Field

from allocator.bounds import (
    MAX_COUNT,
    MAX_PID,
    MAX_SAMPLES_PER_S,
    MAX_SECONDS,
    MAX_WALL_CLOCK,
    MAX_WORKERS,
)

# Iterations, samples, steps and generations: 0 to 2^53 - 1, exact in a float.
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
# A duration, or seconds per sample: 0 to a week.
Seconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
# Samples per second: 0 to what no node does.
Rate = Annotated[float, Field(ge=0.0, le=MAX_SAMPLES_PER_S, allow_inf_nan=False)]
Workers = Annotated[int, Field(ge=0, le=MAX_WORKERS)]  # loader workers per GPU
Pid = Annotated[int, Field(ge=1, le=MAX_PID)]
WallClock = Annotated[float, Field(ge=0.0, le=MAX_WALL_CLOCK, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]  # of the decoder
