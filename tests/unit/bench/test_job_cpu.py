"""The benches' reading of each job's CPU seconds from its process tree (bench/job_cpu.py):
real processes burning real CPU, the test process standing in for the daemon."""

import os
import signal
import subprocess
import sys
import time

import pytest

from bench.job_cpu import JobCpu

# The agent burns 0.4 s itself and starts a worker that burns 0.6 s and is reaped, then one
# that burns until killed; it prints when the first worker is reaped.
AGENT = """
import subprocess, sys, time
def burn(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
burn(0.4)
subprocess.run([sys.executable, "-c", "import time\\nstart = time.process_time()\\n"
                "while time.process_time() - start < 0.6: pass"], check=True)
print("reaped", flush=True)
live = subprocess.Popen([sys.executable, "-c", "while True: pass"])
time.sleep(60)
"""

# An agent whose child (a wrapper, alive) ran and reaped a worker that burned 0.6 s.
WRAPPED = """
import subprocess, sys, time
wrapper = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\\n"
    "subprocess.run([sys.executable, '-c', 'import time\\\\nstart = time.process_time()\\\\n"
    "while time.process_time() - start < 0.6: pass'], check=True)\\n"
    "print('reaped', flush=True)\\ntime.sleep(60)"], stdout=sys.stdout)
time.sleep(60)
"""


def test_a_job_counts_its_agent_its_reaped_and_its_live_workers() -> None:
    env = {**os.environ, "STOKER_JOB_ID": "j"}
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT], env=env, stdout=subprocess.PIPE, start_new_session=True
    )
    stranger = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # no job's
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().strip() == b"reaped"
        time.sleep(0.5)  # the live worker burns some
        used = JobCpu(os.getpid())
        used.read()
        assert set(used.seconds) == {"j"}
        first = used.seconds["j"]
        assert first >= 1.0 + 0.1  # 0.4 + 0.6 reaped, and the live worker's share
        time.sleep(0.5)
        used.read()
        assert used.seconds["j"] > first  # the live worker still burns
    finally:
        os.killpg(agent.pid, signal.SIGKILL)  # the agent and its live worker
        stranger.kill()
        for process in (agent, stranger):
            process.wait()
        if agent.stdout is not None:
            agent.stdout.close()
    ended = used.seconds["j"]
    used.read()  # the launch has ended: what it used stays
    assert used.seconds["j"] == pytest.approx(ended)
    # A relaunch whose agent runs a wrapper that ran and reaped a worker burning 0.6 s.
    relaunch = subprocess.Popen(
        [sys.executable, "-c", WRAPPED], env=env, stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert relaunch.stdout is not None
        assert relaunch.stdout.readline().strip() == b"reaped"
        used.read()
        assert used.seconds["j"] >= ended + 0.6  # both launches, the reaped worker counted
    finally:
        os.killpg(relaunch.pid, signal.SIGKILL)
        relaunch.wait()
        if relaunch.stdout is not None:
            relaunch.stdout.close()
