from pathlib import Path

import pytest

from tests.unit.workloads.builders import job, workload
from workloads.errors import WorkloadError
from workloads.live import DEMO_IMAGE_PX, OwnImages, job_body, own_images
from workloads.spec import dump_workload, load_workload, parse_workload

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "name", [path.stem for path in sorted((REPO / "configs" / "workloads").glob("*.toml"))]
)
def test_shipped_workloads_round_trip(name: str, tmp_path: Path) -> None:
    original = load_workload(REPO / "configs" / "workloads" / f"{name}.toml")
    copy = tmp_path / "copy.toml"
    copy.write_text(dump_workload(original))
    assert load_workload(copy) == original


def test_paper_dynamic_is_table_three() -> None:
    dynamic = load_workload(REPO / "configs" / "workloads" / "paper-dynamic.toml")
    assert [j.arrival_s for j in dynamic.jobs] == [0, 0, 120, 420, 420, 420, 800, 800]
    assert [j.iterations for j in dynamic.jobs] == [1000, 1000, 1500, 1500, 500, 500, 1000, 1500]
    assert [j.workers_per_gpu for j in dynamic.jobs] == [6, 6, 6, 2, 6, 4, 6, 4]


@pytest.mark.parametrize(
    ("tables", "where", "words"),
    [
        ({"truth": {"gpu_speed": 1.0}}, "test workload", "unknown key(s) gpu_speed"),
        ({"scheduler": {"arrival_window_s": -1}}, "test workload", "must not be negative"),
        ({"scheduler": {"window": 3}}, "test workload", "unknown key(s) window"),
        ({"node": {"gpus": 0}}, "test workload: node.gpus", "greater than or equal to 1"),
    ],
)
def test_bad_tables_name_the_field(tables: dict[str, object], where: str, words: str) -> None:
    with pytest.raises(WorkloadError) as raised:
        workload(job("a"), **tables)
    assert raised.value.where.startswith(where)
    assert words in str(raised.value)


def test_bad_jobs_name_the_job() -> None:
    with pytest.raises(WorkloadError, match="needs 8 GPUs, the node has 4"):
        workload(job("a", gpus=8, batch_size=256))
    with pytest.raises(WorkloadError, match="used twice"):
        workload(job("a"), job("a"))
    with pytest.raises(WorkloadError, match="unknown model 'AlexNet'"):
        workload(job("a", model="AlexNet"))
    with pytest.raises(WorkloadError, match=r"jobs\.0\.iterations"):
        workload(job("a", iterations=0))
    with pytest.raises(WorkloadError, match="no GPU 7"):
        workload(job("a", gpu_indices=[7]))


def test_unreadable_files_say_so(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no such workload file"):
        load_workload(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[node\ngpus = 4\n")
    with pytest.raises(WorkloadError, match="not valid TOML"):
        load_workload(broken)
    with pytest.raises(WorkloadError, match="jobs"):
        parse_workload({"name": "empty", "jobs": []}, "empty")


def test_a_job_with_its_own_images_gets_their_folder_or_a_clear_error(tmp_path: Path) -> None:
    jobs = workload(
        job("plain"),
        job("heavy", image_px=768),
        job("also", image_px=768),
        job("remote", read_latency_ms=50),
        job("remote-heavy", image_px=768, read_latency_ms=50),
    )
    heavy_images, remote_images = OwnImages(768), OwnImages(DEMO_IMAGE_PX, 50.0)
    assert own_images(jobs) == [remote_images, heavy_images, OwnImages(768, 50.0)]
    assert len({kind.folder for kind in own_images(jobs)}) == 3, "a folder each"
    plain, heavy, _, remote, _ = jobs.jobs
    assert "dataset" not in job_body(plain), "the daemon's default dataset"
    folders = {heavy_images: tmp_path / "heavy", remote_images: tmp_path / "remote"}
    assert job_body(heavy, folders)["dataset"] == str(tmp_path / "heavy")
    assert job_body(remote, folders)["dataset"] == str(tmp_path / "remote")
    with pytest.raises(WorkloadError, match=r"jobs\[heavy\]\.image_px"):
        job_body(heavy)
    with pytest.raises(WorkloadError, match=r"jobs\[remote\]\.read_latency_ms"):
        job_body(remote, {heavy_images: tmp_path})
    with pytest.raises(WorkloadError, match=r"jobs\.0\.image_px"):
        workload(job("tiny", image_px=8))
    with pytest.raises(WorkloadError, match=r"jobs\.0\.read_latency_ms"):
        workload(job("forever", read_latency_ms=20_000))
    local = workload(job("instant", read_latency_ms=0))
    assert own_images(local) == [] and "dataset" not in job_body(local.jobs[0]), "0: local"
