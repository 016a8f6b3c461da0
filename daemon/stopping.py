"""Ending the streamed responses as the server stops: uvicorn waits for open responses
(up to `timeout_graceful_shutdown`) before it stops the app, so a dashboard's event stream
or a `stoker logs -f` held every stop up by that long, and was then cut with an error."""

from threading import Event
from types import FrameType

import uvicorn
from fastapi import FastAPI, Request


def stop_streams(app: FastAPI) -> None:
    """End `app`'s event streams and log follows at their next poll: called as the server
    begins to stop (cli/serve.py). Safe in a signal handler."""
    _stopping(app).set()


def streaming(request: Request) -> bool:
    """Whether a streamed response may go on: its server is not stopping."""
    return not _stopping(request.app).is_set()


def _stopping(app: FastAPI) -> Event:
    found: Event | None = getattr(app.state, "stopping", None)
    if found is None:
        found = app.state.stopping = Event()
    return found


class Server(uvicorn.Server):
    """uvicorn's server, that ends the app's streams as soon as it is told to stop."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app
        _stopping(app)  # made before any request: the signal handler then only sets it

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        stop_streams(self._app)
        super().handle_exit(sig, frame)
