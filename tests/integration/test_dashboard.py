"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright)
against a real daemon with simulated agents. Skipped, saying why, where Chromium or
Playwright is missing (`make test` tries to install both)."""

import collections
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.datafiles import make_dataset
from tests.integration.daemon_harness import Daemon, daemon_factory, job_body, wait_for

pytestmark = pytest.mark.timeout(180)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPOCHS_10_OF_16 = ("--epochs", "10", "--batch-size", "16")
TOKENS = {"admin": "admin-secret-token-0123456789", "alice": "alice-secret-token-0123456789"}

if CHROMIUM is None:
    pytest.skip(
        "no Chromium: `apt-get install chromium` (Debian) to run the dashboard's browser tests",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="no Playwright: `pip install playwright` (the dev extra)"
)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    factory = daemon_factory(tmp_path)
    yield next(factory)(node={"cpu_slots": 4, "cpu_workers": 12}, tokens=TOKENS)
    next(factory, None)


@pytest.fixture
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        # --no-sandbox: CI runs tests as root, where Chromium's sandbox refuses to start.
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def submit(client: httpx.Client, name: str, **fields: Any) -> str:
    reply = client.post("/v1/jobs", json=job_body(name, iterations=100_000, **fields))
    assert reply.status_code == 201, reply.text
    job_id: str = reply.json()["id"]
    return job_id


def open_page(browser: Any, daemon: Daemon, tenant: str) -> tuple[Any, list[str]]:
    """A page signed in through the link `stoker dashboard` prints; and its console errors."""
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{daemon.url}/?token={TOKENS[tenant]}")
    assert page.url == f"{daemon.url}/", "the token left the address bar"
    return page, errors


def test_the_dashboard_shows_jobs_live_with_no_console_error(
    daemon: Daemon, browser: Any, tmp_path: Path
) -> None:
    with daemon.client() as admin:
        submit(admin, "resnet-a")
        submit(admin, "vgg-b", model="smVGG7")
        wait_for("both to run", lambda: _all_running(admin, 2))
        page, errors = open_page(browser, daemon, "admin")
        (cookie,) = page.context.cookies()
        assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (
            "stoker_token",
            True,
            "Strict",
        )
        jobs = page.locator("#jobs tbody tr")
        sync_api.expect(jobs).to_have_count(2)
        sync_api.expect(page.locator("#jobs")).to_contain_text("resnet-a")
        sync_api.expect(page.locator("#jobs")).to_contain_text("vgg-b")
        navigations: list[str] = []
        page.on("framenavigated", lambda frame: navigations.append(frame.url))
        submit(admin, "late-c", model="smResnet20")
        sync_api.expect(page.locator("#jobs")).to_contain_text("late-c", timeout=20_000)
        assert navigations == [], "the page updated without reloading"
        sync_api.expect(page.locator("#live")).to_have_text("live")
        sync_api.expect(page.locator("#workers .scatterlayer .trace").first).to_be_attached()
        error = page.locator("#jobs tbody tr", has_text="resnet-a").locator("td").nth(8)
        sync_api.expect(error).to_have_text(re.compile(r"^[+-]\d+ %$"), timeout=20_000)
        page.fill("#find", "vgg")
        sync_api.expect(page.locator("#jobs tbody tr:not(.hidden)")).to_have_count(1)
        page.fill("#find", "")
        page.wait_for_timeout(1500)  # a few live refreshes
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        assert (tmp_path / "dashboard.png").stat().st_size > 20_000
        assert errors == []


def test_a_tenant_sees_its_own_jobs_and_a_wrong_token_gets_no_page(
    daemon: Daemon, browser: Any
) -> None:
    with daemon.client() as admin, daemon.client("alice") as alice:
        admins = submit(admin, "admins-job")
        submit(alice, "alices-job")
        wait_for("both to run", lambda: _all_running(admin, 2))
    page, errors = open_page(browser, daemon, "alice")
    sync_api.expect(page.locator("#jobs")).to_contain_text("alices-job")
    sync_api.expect(page.locator("#jobs tbody tr")).to_have_count(1)
    sync_api.expect(page.locator("#node")).to_contain_text("tenant alice")
    snapshot = page.request.get(f"{daemon.url}/v1/dashboard").json()  # with the page's cookie
    assert [job["name"] for job in snapshot["jobs"]] == ["alices-job"]
    assert admins not in str(snapshot["events"]), "a plan names the other tenant's job"
    assert errors == []
    stranger = browser.new_page()
    reply = stranger.goto(f"{daemon.url}/?token=wrong")
    assert reply is not None and reply.status == 401
    assert "wrong" in stranger.content()
    assert stranger.context.cookies() == []


def _all_running(client: httpx.Client, count: int) -> bool:
    states = [job["state"] for job in client.get("/v1/jobs").json()]
    return len(states) == count and set(states) == {"running"}


def test_the_image_examples_loss_and_log_are_drawn_while_it_is_resized_live(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/image_classifier.py under a daemon: a second job arrives and the example is
    resized in place, every sample of every epoch trained once; its loss curve and its log
    are on the dashboard; it ends completed, with its final checkpoint."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    make_dataset(tmp_path / "data", images=256, size=32)
    factory = daemon_factory(tmp_path)
    daemon = next(factory)(node={"cpu_slots": 2, "cpu_workers": 2}, tokens=TOKENS)
    body = {
        "name": "images",
        "command": ["python", str(EXAMPLES / "image_classifier.py"), "data", *EPOCHS_10_OF_16],
        "workdir": str(tmp_path),
        "batch_size": 16,
        "gpus": 1,
        "audit_samples": True,  # each sample the SDK hands out, a line (agents/audit.py)
    }
    try:
        with daemon.client() as admin:
            image = admin.post("/v1/jobs", json=body).json()["id"]
            wait_for("the example to train", lambda: _training(admin, image), timeout_s=60)
            workers = admin.get(f"/v1/jobs/{image}").json()["workers_per_gpu"]
            submit(admin, "second")  # a simulated job: the example's workers are split
            resized = wait_for("a live resize", lambda: _resumed(admin, image), timeout_s=60)
            assert resized["workers"] < workers
            page, errors = open_page(browser, daemon, "admin")
            page.locator("#jobs tbody tr", has_text="images").click()
            sync_api.expect(page.locator("#job-name")).to_have_text("images")
            curve = page.locator("#job-metrics .scatterlayer .trace path.js-line")
            sync_api.expect(curve).to_be_attached(timeout=10_000)
            sync_api.expect(page.locator("#job-note")).to_contain_text("newest: loss")
            sync_api.expect(page.locator("#job-log")).to_contain_text("[rank 0] epoch 0: loss")
            done = wait_for(
                "the example to end",
                lambda: (j := admin.get(f"/v1/jobs/{image}").json())["state"] == "completed" and j,
                timeout_s=120,
            )
            assert done["restarts"] == 0, "resized in place, never relaunched"
            page.select_option("#job-stream", "stderr")
            sync_api.expect(page.locator("#job-log")).not_to_contain_text("epoch 0: loss")
            page.select_option("#job-stream", "stdout")
            sync_api.expect(page.locator("#job-log")).to_contain_text(
                "epoch 9: loss", timeout=10_000
            )
            points = (curve.first.get_attribute("d") or "").count("L") + 1
            assert points >= 100, "the curve has the run's points"
            assert errors == []
        checkpoints = sorted((daemon.state_dir / "jobs" / image / "checkpoints").glob("*.pt"))
        assert checkpoints, "the final checkpoint is kept"
        audit = (daemon.state_dir / "jobs" / image / "audit" / "rank0.txt").read_text()
        trained = collections.Counter(tuple(line.split()[:2]) for line in audit.splitlines())
        every = {(str(epoch), str(index)) for epoch in range(10) for index in range(256)}
        assert set(trained) == every and set(trained.values()) == {1}, "every sample once"
    finally:
        next(factory, None)


def _training(client: httpx.Client, job_id: str) -> bool:
    job = client.get(f"/v1/jobs/{job_id}").json()
    return bool(job["state"] == "running" and job["iteration"] > 0)


def _resumed(client: httpx.Client, job_id: str) -> dict[str, Any] | None:
    for event in client.get(f"/v1/jobs/{job_id}/events").json():
        if event["kind"] == "resumed":
            data: dict[str, Any] = event["data"]
            return data
    return None


def test_a_headless_browser_gets_the_node_drawn_in_its_first_paint(
    daemon: Daemon, tmp_path: Path
) -> None:
    # `chromium --headless --screenshot URL` caught only "connecting" (issue 36): the page
    # drew nothing until its first request came back. It now carries the node as served.
    with daemon.client() as admin:
        first = submit(admin, "twin")
        second = submit(admin, "twin")  # two jobs of one name: told apart by their ids' ends
        wait_for(
            "both running",
            lambda: all(
                admin.get(f"/v1/jobs/{job}").json()["state"] == "running" for job in (first, second)
            ),
        )
    dumped = subprocess.run(
        [
            CHROMIUM or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
            f"{daemon.url}/?token={TOKENS['admin']}",
        ],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert f"twin ({first[-6:]})" in dumped and f"twin ({second[-6:]})" in dumped
    assert ">connecting<" not in dumped
