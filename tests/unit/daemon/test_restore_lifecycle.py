"""A daemon killed with kill -9 while its jobs ran, and the node lost their agents too: what
the next daemon decides for each, on the service harness's hand-held clock. The real kill -9
of a `stoker serve` (its restore, and running agents that re-attach) stays in
tests/integration/test_daemon.py, test_kill_9_of_the_daemon_loses_no_job_and_running_agents_
reattach."""

import asyncio
from pathlib import Path

from agents.protocol import FinishedMessage, Hello
from scheduler.config import SchedulerConfig
from tests.unit.daemon.service_harness import Driver

# The integration daemons' settings (tests/integration/daemon_harness.py, FAST): windows
# short, no gate, a relaunch 0.2 s after a failure.
FAST = SchedulerConfig(
    arrival_window_s=0.3,
    completion_window_s=0.3,
    gate=False,
    restart_backoff_s=0.2,
    heartbeat_timeout_s=10.0,
)


def test_after_kill_9_a_job_whose_agent_is_gone_follows_its_restart_policy(
    tmp_path: Path,
) -> None:
    """Moved from tests/integration/test_daemon.py (two daemons and their simulated agents
    as processes): the decision is the restore's, which the harness runs on a real state
    dir; test_kill_9_of_the_daemon_loses_no_job_and_running_agents_reattach there covers a
    real kill -9 and restart."""

    async def scenario() -> None:
        driver = Driver(tmp_path, FAST)
        # Both run when killed, and the relaunch trains kept from its checkpoint to its end.
        driver.at(1.0).submit("kept", iterations=500)
        driver.at(1.0).submit("fragile", iterations=500, max_restarts=0)
        driver.at(1.5).tick()
        for job_id, pid in driver.launcher.live.items():
            driver.agent(Hello(job=job_id, gen=1, pid=pid))
        assert {driver.state(job) for job in ("kept", "fragile")} == {"running"}
        driver.launcher.live.clear()  # the node lost them too
        driver.at(3.0).restart()
        driver.at(3.5).tick()  # its back-off (0.2 s) passed: relaunched
        assert driver.launcher.launched().count("kept") == 2
        driver.at(4.0).agent(Hello(job="kept", gen=1, pid=driver.launcher.live["kept"]))
        driver.at(9.0).agent(FinishedMessage(job="kept", gen=1, iteration=500))
        driver.launcher.exit("kept", 0)
        driver.at(9.5).tick()
        assert driver.state("kept") == "completed"
        kept, fragile = driver.service.store.job("kept"), driver.service.store.job("fragile")
        assert kept is not None and fragile is not None
        assert kept.restarts == 1, "relaunched from its checkpoint"
        assert fragile.state == "failed", "max_restarts = 0"
        assert driver.launcher.launched().count("fragile") == 1, "never relaunched"
        await driver.close()

    asyncio.run(scenario())
