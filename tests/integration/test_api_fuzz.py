"""schemathesis fuzzes the live daemon against its own OpenAPI: no input gets a 5xx."""

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.integration.daemon_harness import daemon_factory, job_body

pytestmark = pytest.mark.timeout(400)
NEVER_ENDS = {"/v1/events/stream"}  # covered by tests/integration/test_daemon_observe.py


def test_no_input_breaks_the_daemon(tmp_path: Path) -> None:
    factory = daemon_factory(tmp_path)
    daemon = next(factory)()
    try:
        schema = schemathesis.openapi.from_url(f"{daemon.url}/openapi.json")
        headers = {"Authorization": f"Bearer {daemon.tokens['admin']}"}
        operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
        fuzzed = [op for op in operations if op.path not in NEVER_ENDS]
        assert {op.path for op in fuzzed} >= {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/tpm/samples"}
        failures: list[str] = []
        statuses: set[int] = set()

        # Every operation, with data that fits its schema and data that does not.
        cases = st.one_of(*(op.as_strategy(mode) for op in fuzzed for mode in GenerationMode))

        @given(case=cases)
        @settings(
            max_examples=300,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,  # the same cases every run
        )
        def no_server_error(case: Any) -> None:  # a schemathesis.Case
            response = case.call(headers=headers)
            statuses.add(response.status_code)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path}: {response.text[:300]}")

        no_server_error()
        assert failures == []
        assert {200, 422} <= statuses, statuses  # reads answered, bad bodies refused
        # After all that, the daemon still takes a valid job.
        with daemon.client() as client:
            reply = client.post("/v1/jobs", json=job_body("after-the-fuzz"))
            assert reply.status_code == 201, reply.text
        assert daemon.process is not None and daemon.process.poll() is None
    finally:
        next(factory, None)
