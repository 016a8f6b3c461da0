"""Reported metrics in the real state database: replays replace, long runs thin evenly."""

import math
import sqlite3
from pathlib import Path

import pytest

from daemon import reported
from daemon.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "stoker.db")


def losses(store: Store, job: str = "j") -> list[tuple[int, float | None]]:
    return store.reported.series(job)["loss"].points


def test_points_are_kept_per_job_and_metric(store: Store) -> None:
    store.reported.add("j", [(1, {"loss": 2.0, "lr": 0.1}), (2, {"loss": 1.5})])
    store.reported.add("k", [(1, {"loss": 9.0})])
    series = store.reported.series("j")
    assert series["loss"].points == [(1, 2.0), (2, 1.5)]
    assert series["lr"].points == [(1, 0.1)]
    assert losses(store, "k") == [(1, 9.0)]
    assert store.reported.series("nobody") == {}


def test_a_relaunch_replaying_from_its_checkpoint_replaces_the_steps_after_it(
    store: Store,
) -> None:
    store.reported.add("j", [(step, {"loss": 10.0 - step}) for step in range(1, 9)])
    # killed at step 8, relaunched from the checkpoint of step 5: it reports 6.. again
    store.reported.add("j", [(step, {"loss": 100.0 + step}) for step in range(6, 10)])
    assert [step for step, _ in losses(store)] == list(range(1, 10))
    assert dict(losses(store))[6] == 106.0 and dict(losses(store))[5] == 5.0


def test_nan_and_infinity_are_kept_as_missing_values(store: Store) -> None:
    store.reported.add("j", [(1, {"loss": math.nan}), (2, {"loss": math.inf}), (3, {"loss": 1.0})])
    assert losses(store) == [(1, None), (2, None), (3, 1.0)]


def test_a_long_run_is_thinned_evenly_and_keeps_its_newest_point(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reported, "MAX_POINTS", 100)
    for start in range(1, 1001, 50):  # 1000 steps, 50 per message, as a flush would send
        message = [(step, {"loss": float(step)}) for step in range(start, start + 50)]
        store.reported.add("j", message)
    points = losses(store)
    steps = [step for step, _ in points]
    stride = store.reported.series("j")["loss"].stride
    assert stride == 16 and len(points) <= 100
    assert steps[-1] == 1000, "the newest point stays"
    assert steps[:-1] == list(range(stride, 1000, stride)), "evenly spaced over the whole run"
    store.reported.add("j", [(1001, {"loss": 0.0})])
    assert [step for step, _ in losses(store)][-2:] == [992, 1001], "the old newest gives way"


def test_a_state_file_of_schema_1_gains_the_metrics_tables(tmp_path: Path) -> None:
    path = tmp_path / "stoker.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE reported")
        db.execute("DROP TABLE reported_series")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    store = Store(path)
    store.reported.add("j", [(1, {"loss": 1.0})])
    assert losses(store) == [(1, 1.0)]


def test_a_job_keeps_at_most_its_series_limit_of_names(store: Store) -> None:
    # Fresh names on every point made 480,000 series in 0.2 s (issue 37, finding 6).
    store.reported.limit(max_series=3, per_s=1000.0)
    kept = store.reported.add("j", [(1, {"loss": 1.0, "lr": 0.1}), (2, {"a": 1.0, "b": 2.0})])
    assert kept.dropped_names == 1 and not kept.over_rate
    assert kept.points == [(1, {"loss": 1.0, "lr": 0.1}), (2, {"a": 1.0})], "first come, kept"
    again = store.reported.add("j", [(3, {"loss": 0.5, "c": 1.0})])
    assert again.dropped_names == 1 and again.points == [(3, {"loss": 0.5})], "known names go on"
    assert sorted(store.reported.series("j")) == ["a", "loss", "lr"]
    assert store.reported.add("k", [(1, {"c": 1.0})]).dropped_names == 0, "per job"


def test_a_job_over_its_message_rate_is_dropped_whole_until_it_slows(store: Store) -> None:
    store.reported.limit(max_series=10, per_s=2.0)  # a burst of 20, then 2 a second
    said = [store.reported.add("j", [(step, {"loss": 1.0})], now=100.0) for step in range(25)]
    assert [kept.over_rate for kept in said] == [False] * 20 + [True] * 5
    assert not store.reported.add("k", [(1, {"loss": 1.0})], now=100.0).over_rate, "per job"
    assert store.reported.add("j", [(30, {"loss": 1.0})], now=100.4).over_rate
    assert not store.reported.add("j", [(31, {"loss": 1.0})], now=100.6).over_rate, "refilled"
    assert [step for step, _ in losses(store)] == [*range(20), 31]
