"""Plans never block the event loop (issue 39, item 3): while the core's policy plans 128
jobs, the daemon's REST API answers as it does when idle.

bench/bench_planning.py runs the scenario: the real ASGI app with its real service, store,
writer and planner on a local socket, 128 jobs planned in one round by the default policy,
and a client process reading one job meanwhile (the jobs' processes are not started)."""

from pathlib import Path

import pytest

from bench.bench_planning import JOBS, P99_GOAL_S, measure


@pytest.mark.serial  # it times requests: alone on the host
def test_rest_answers_fast_while_the_core_plans_128_jobs(tmp_path: Path) -> None:
    run = measure(tmp_path)
    assert run.jobs_planned == JOBS  # one round planned every job
    assert set(run.states) <= {"starting", "running"}, run  # and launched them on its plan
    during = run.while_planning
    # Reads were answered while the plan was being made: on the event loop, none would be.
    assert during.reads >= 5, run
    assert during.p99_ms < P99_GOAL_S * 1e3, run
