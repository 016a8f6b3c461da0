"""Request and reply bodies at the edges (REST and the CLI's files), validated by pydantic.

Field names are the ones DESIGN.md's machine-readable contracts fix. Unknown fields are
refused so that a misspelt key (`step_time` for `step_time_s`) is an error, not a silent
default.

- `jobs.py`: a job's submit body (`JobSubmission`) and its name and variable rules
- `views.py`: what the API answers about a job (`JobView`, `CurveView`)
- `planning.py`: TPM sample uploads and `stoker allocate`'s request
- `problems.py`: a refused body's problems, told with their fix
"""

from daemon.schemas.jobs import JobSubmission
from daemon.schemas.planning import AllocationRequestBody, SampleUpload
from daemon.schemas.problems import describe_validation_error, request_problem
from daemon.schemas.views import CurveView, JobView

__all__ = [
    "AllocationRequestBody",
    "CurveView",
    "JobSubmission",
    "JobView",
    "SampleUpload",
    "describe_validation_error",
    "request_problem",
]
