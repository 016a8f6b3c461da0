import statistics
from pathlib import Path

import pytest

from workloads.errors import WorkloadError
from workloads.simulator import simulate
from workloads.spec import Workload, WorkloadJob
from workloads.trace import DEFAULT_TRACE, ReplayOptions, read_trace, replay_trace
from workloads.truth import NodeTruth

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "workloads" / "traces" / "gavel-msr-seed0-0e4a51.tsv"
GOOD = "ResNet-18 (batch size 64)\tcd x && python3 main.py\t--num_steps\t1\t5000\t{arrival}\t{gpus}"


@pytest.fixture(scope="module")
def replay() -> Workload:
    return replay_trace()


@pytest.fixture(scope="module")
def raw_lines() -> dict[str, list[str]]:
    """The shipped trace by job id (t<line>), read here without the module's parser."""
    lines = SHIPPED.read_text(encoding="utf-8").splitlines()
    return {f"t{number:04d}": line.split("\t") for number, line in enumerate(lines, start=1)}


def step_s(job: WorkloadJob) -> float:
    """The job's step on unshared GPUs by the default truth, before noise."""
    return job.step_time_s(NodeTruth())


def offered_load(workload: Workload) -> float:
    """Arrival rate x mean GPU-seconds per job / GPUs, from the truth's step times."""
    work = [job.gpus * job.iterations * step_s(job) for job in workload.jobs]
    arrivals = [job.arrival_s for job in workload.jobs]
    rate = (len(arrivals) - 1) / (max(arrivals) - min(arrivals))
    return rate * statistics.fmean(work) / workload.node.gpus


def write_trace(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_default_trace_is_the_shipped_copy_with_its_licence() -> None:
    assert DEFAULT_TRACE == SHIPPED
    assert "MIT License" in (SHIPPED.parent / "LICENSE-gavel.txt").read_text(encoding="utf-8")
    assert len(read_trace(SHIPPED)) == 1181


@pytest.mark.parametrize(("gpus", "kept"), [(4, 1113), (2, 662), (1, 436), (8, 1181)])
def test_only_jobs_that_fit_the_node_are_kept(gpus: int, kept: int) -> None:
    workload = replay_trace(options=ReplayOptions(gpus=gpus))
    assert len(workload.jobs) == kept
    assert max(j.gpus for j in workload.jobs) <= gpus
    assert f"kept {kept:,} of 1,181 jobs" in workload.description


def test_each_job_type_maps_to_its_zoo_model_with_the_trace_batch(
    replay: Workload, raw_lines: dict[str, list[str]]
) -> None:
    expected = {
        "ResNet-18": "Resnet18",
        "ResNet-50": "Resnet50",
        "Transformer": "Resnet34",
        "LM": "VGG11",
        "Recommendation": "smResnet20",
        "CycleGAN": "VGG16",
        "A3C": "smVGG7",
    }
    seen = set()
    for job in replay.jobs:
        fields = raw_lines[job.id]
        family, _, batch = fields[0].partition(" (batch size ")
        seen.add(family)
        assert job.model == expected[family]
        assert job.gpus == int(fields[6])
        assert job.gpu_indices is None
        if batch:
            assert job.batch_size == min(int(batch.rstrip(")")), 256 * job.gpus)
        else:
            assert job.batch_size == 32
    assert seen == set(expected)
    assert replay.node.max_jobs_per_gpu == 1
    for pair in ("Transformer -> Resnet34", "A3C -> smVGG7", "capped at 256"):
        assert pair in replay.description


def test_only_recommendation_batches_are_capped(
    replay: Workload, raw_lines: dict[str, list[str]]
) -> None:
    capped = set()
    for job in replay.jobs:
        family, _, batch = raw_lines[job.id][0].partition(" (batch size ")
        if batch and job.batch_size < int(batch.rstrip(")")):
            capped.add(family)
    assert capped == {"Recommendation"}
    assert max(j.batch_size / j.gpus for j in replay.jobs) == 256


def test_steps_scale_by_the_iteration_scale(
    replay: Workload, raw_lines: dict[str, list[str]]
) -> None:
    for job in replay.jobs:
        assert job.iterations == max(1, round(int(raw_lines[job.id][4]) * 0.001))
    tenfold = replay_trace(options=ReplayOptions(iteration_scale=0.01, limit=5))
    assert [j.iterations for j in tenfold.jobs] == [951, 100, 278, 11047, 474]
    assert "round(steps x 0.01)" in tenfold.description


def test_the_default_scale_makes_the_median_job_minutes_not_days(replay: Workload) -> None:
    minutes = [job.iterations * step_s(job) / 60 for job in replay.jobs]
    assert 1 < statistics.median(minutes) < 15


@pytest.mark.parametrize("load", [0.9, 0.45, 1.5])
def test_arrivals_are_compressed_to_the_target_load(load: float) -> None:
    workload = replay_trace(options=ReplayOptions(load=load, limit=200))
    assert offered_load(workload) == pytest.approx(load, rel=0.01)
    arrivals = [j.arrival_s for j in workload.jobs]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert f"offered load is {load:g}" in workload.description


def test_compression_keeps_the_trace_shape(
    replay: Workload, raw_lines: dict[str, list[str]]
) -> None:
    original = [float(raw_lines[j.id][5]) for j in replay.jobs]
    factor = replay.jobs[-1].arrival_s / original[-1]
    for job, arrival in zip(replay.jobs, original, strict=True):
        assert job.arrival_s == pytest.approx(arrival * factor, abs=0.001)
    assert offered_load(replay) == pytest.approx(0.9, rel=0.01)


def test_limit_takes_the_first_jobs_that_fit() -> None:
    workload = replay_trace(options=ReplayOptions(gpus=1, limit=10))
    assert len(workload.jobs) == 10
    ids = [int(j.id[1:]) for j in workload.jobs]
    assert ids == sorted(ids)
    assert "first 10 of them (--limit)" in workload.description


def test_a_small_replay_simulates_to_completion() -> None:
    workload = replay_trace(options=ReplayOptions(limit=30))
    result = simulate(workload, "waa", 0)
    assert [j.id for j in result.jobs] == [j.id for j in workload.jobs]
    for done, spec in zip(result.jobs, workload.jobs, strict=True):
        assert spec.arrival_s <= done.start_s < done.end_s
    assert result.makespan_s < 4 * 3600  # compressed: hours, not the trace's days


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("ResNet-18 (batch size 64)\tcmd\t--num_steps\t1\t5000\t12.0", "has 6 tab-separated"),
        ("Alexnet (batch size 64)\tcmd\t--n\t1\t5000\t12.0\t1", "unknown job type 'Alexnet"),
        ("LM (batch size 20)\tcmd\t--n\t1\tmany\t12.0\t1", "field 5 (total steps) is 'many'"),
        ("LM (batch size 20)\tcmd\t--n\t1\t50\tsoon\t1", "field 6 (arrival time)"),
        ("LM (batch size 20)\tcmd\t--n\t1\t50\t3.0\t0", "field 7 (scale factor) is '0'"),
    ],
)
def test_a_malformed_line_is_named_by_file_and_line(tmp_path: Path, bad: str, words: str) -> None:
    path = write_trace(tmp_path, GOOD.format(arrival=0, gpus=1), "", bad)
    with pytest.raises(WorkloadError) as raised:
        replay_trace(path)
    assert raised.value.where == f"{path}:3"
    assert words in raised.value.message


def test_unreadable_or_unfitting_traces_say_what_to_change(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no such trace file"):
        replay_trace(tmp_path / "missing.tsv")
    with pytest.raises(WorkloadError, match="holds no jobs"):
        replay_trace(write_trace(tmp_path, ""))
    big = write_trace(tmp_path, GOOD.format(arrival=0, gpus=8))
    with pytest.raises(WorkloadError) as raised:
        replay_trace(big)
    assert raised.value.where == "--gpus"


def test_jobs_arriving_together_all_start_at_zero(tmp_path: Path) -> None:
    path = write_trace(tmp_path, GOOD.format(arrival=50, gpus=1), GOOD.format(arrival=50, gpus=2))
    workload = replay_trace(path)
    assert [j.arrival_s for j in workload.jobs] == [0.0, 0.0]
    assert "no load target" in workload.description


@pytest.mark.parametrize(
    ("options", "option"),
    [
        (ReplayOptions(load=0.0), "--load"),
        (ReplayOptions(iteration_scale=-1.0), "--iteration-scale"),
        (ReplayOptions(limit=0), "--limit"),
        (ReplayOptions(gpus=0), "--gpus"),
        (ReplayOptions(cpu_workers=0), "--cpu-workers"),
    ],
)
def test_bad_options_are_named(options: ReplayOptions, option: str) -> None:
    with pytest.raises(WorkloadError) as raised:
        replay_trace(options=options)
    assert raised.value.where == option
