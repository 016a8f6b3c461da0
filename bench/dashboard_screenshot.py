"""The README's dashboard picture, from a real run: `stoker demo` (real PyTorch jobs on
this machine) in a subprocess, and headless Chromium (Debian's, driven by Playwright)
opening the link the demo prints once several jobs have run and been resized.

Run: .venv/bin/python -m bench.dashboard_screenshot [--out docs/images/dashboard.png]
"""

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

LINK = re.compile(r"dashboard: (\S+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/images/dashboard.png"))
    parser.add_argument("--after-s", type=float, default=40.0, help="into the demo")
    parser.add_argument("--port", type=int, default=8479)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no Chromium: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="stoker-shot-") as scratch:
        demo = subprocess.Popen(
            [sys.executable, "-m", "cli", "demo", "--state-dir", scratch,
             "--port", str(args.port)],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert demo.stdout is not None
        started, link = time.monotonic(), None
        for line in demo.stdout:
            print(line, end="")
            found = LINK.search(line)
            if found:
                link = found.group(1)
                break
        if link is None:
            sys.exit("the demo printed no dashboard link")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(link)
            while time.monotonic() - started < args.after_s:
                line = demo.stdout.readline()
                print(line, end="")
            page.wait_for_timeout(2000)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out), full_page=True)
            browser.close()
        print(f"saved {args.out}")
        demo.send_signal(signal.SIGINT)  # the demo stops its daemon and agents
        demo.communicate(timeout=120)


if __name__ == "__main__":
    main()
