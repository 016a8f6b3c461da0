"""A job a round has given workers that its agent has not taken up yet says so: launched
and waiting for its hello, or told to pause and resize (`planned_workers_per_gpu`, and
`stoker show`'s workers line), rather than "none yet (not planned)"."""

import asyncio
from pathlib import Path
from typing import Any

from agents.protocol import Hello, PausedMessage
from cli.job_view import _described
from daemon.api.views import job_view
from daemon.config import NodeConfig
from scheduler.config import SchedulerConfig
from tests.unit.daemon.service_harness import Driver

NOW = SchedulerConfig(arrival_window_s=0.0, completion_window_s=0.0, gate=False)


def shown(driver: Driver, job_id: str) -> dict[str, Any]:
    record = driver.service.store.job(job_id)
    assert record is not None, job_id
    return job_view(driver.service, record).model_dump(mode="json")


def workers_line(view: dict[str, Any]) -> str:
    return dict(_described(view, {}, 0.0, "GPU"))["workers"]


def test_workers_given_and_not_yet_taken_up_are_shown_as_planned(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=NodeConfig(gpus=2, cpu_workers=8))
        driver.at(1.0).submit("a", iterations=500)
        view = shown(driver, "a")
        assert view["state"] == "starting" and view["workers_per_gpu"] is None
        planned = view["planned_workers_per_gpu"]
        assert planned is not None and planned >= 1
        assert workers_line(view) == (
            f"{planned} loader processes per GPU planned, taken up when its agent says hello"
        )
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=driver.launcher.live["a"], workers=planned))
        view = shown(driver, "a")
        assert (view["workers_per_gpu"], view["planned_workers_per_gpu"]) == (planned, None)
        assert workers_line(view) == f"{planned} loader processes per GPU"
        # A second job: the first is told to shrink, and says so until it has resumed.
        driver.at(2.0).submit("b", iterations=500)
        view = shown(driver, "a")
        assert view["state"] == "pausing", view
        smaller = view["planned_workers_per_gpu"]
        assert smaller is not None and smaller < planned
        assert workers_line(view) == f"{planned} loader processes per GPU, resizing to {smaller}"
        driver.at(2.5).agent(PausedMessage(job="a", gen=2, iteration=40, checkpoint=""))
        assert shown(driver, "a")["planned_workers_per_gpu"] == smaller  # resuming
        await driver.close()

    asyncio.run(scenario())
