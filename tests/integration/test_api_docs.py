"""`/docs` of a real `stoker serve` works without internet: the page names only the daemon's
own URLs, they serve Swagger UI's script and style, and in a real Chromium that may reach
nothing but the daemon the page draws the API's routes."""

import re
import shutil
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.daemon_harness import Daemon, daemon_factory

pytestmark = pytest.mark.timeout(120)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Links(HTMLParser):
    """Every URL the page makes a browser load: `src` and `href` attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    factory = daemon_factory(tmp_path_factory.mktemp("docs"))
    yield next(factory)()
    next(factory, None)


def test_docs_page_loads_its_assets_from_the_daemon_only(daemon: Daemon) -> None:
    page = httpx.get(f"{daemon.url}/docs", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    links = _Links()
    links.feed(page.text)
    assert links.urls, "the page loads its script and style"
    assert all(url.startswith("/") and not url.startswith("//") for url in links.urls), links
    assert "cdn" not in page.text and "https://" not in page.text
    kinds: dict[str, str] = {}
    for url in links.urls:
        asset = httpx.get(f"{daemon.url}{url}", timeout=10)
        assert asset.status_code == 200, url
        assert len(asset.content) > 500, url
        kinds[url.rsplit(".", 1)[-1]] = asset.headers["content-type"]
    assert kinds["js"].startswith("text/javascript") and kinds["css"].startswith("text/css")
    spec = re.search(r"url: '([^']+)'", page.text)
    assert spec is not None
    schema = httpx.get(f"{daemon.url}{spec.group(1)}", timeout=10).json()
    assert schema["openapi"].startswith("3.")
    # The bearer token is declared, so that "Authorize" in Swagger UI sends it.
    assert schema["components"]["securitySchemes"]["token"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "a tenant's token: `tokens` in the config, or <state dir>/admin.token",
    }
    assert schema["paths"]["/v1/jobs"]["post"]["security"] == [{"token": []}]
    assert httpx.get(f"{daemon.url}/docs/assets/../admin.token", timeout=10).status_code == 404
    assert httpx.get(f"{daemon.url}/redoc", timeout=10).status_code != 200, "a CDN page"


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: `apt-get install chromium` (Debian)")
def test_swagger_ui_draws_the_api_in_a_browser_cut_off_from_the_internet(daemon: Daemon) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="no Playwright (the dev extra)")
    elsewhere: list[str] = []
    errors: list[str] = []

    def only_the_daemon(route: Any) -> None:
        if route.request.url.startswith(daemon.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.route("**/*", only_the_daemon)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{daemon.url}/docs")
        operations = page.locator(".opblock-summary-path")
        sync_api.expect(operations.first).to_be_visible(timeout=20_000)
        paths = set(operations.all_inner_texts())
        browser.close()
    assert {"/v1/jobs", "/v1/tpm/samples"} <= {path.replace("\u200b", "") for path in paths}
    assert elsewhere == [] and errors == []


def test_the_bundled_swagger_ui_has_every_asset_and_reads_openapi_3_1() -> None:
    from daemon import apidocs  # noqa: PLC0415

    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        assert (apidocs.SWAGGER_UI / name).is_file(), name
    assert Path(apidocs.SWAGGER_UI).name.startswith("swagger-ui-5."), "OpenAPI 3.1 needs 5.x"
