"""The SDK's sample audit (STOKER_AUDIT_DIR): what the job's loader handed out, by rank and
global batch, rolled back with the job to its checkpoint."""

from pathlib import Path

from agents.audit import Audit
from agents.environment import JobEnvironment
from agents.sdk import Job
from tests.unit.agents.sdk_builders import Numbers


def job(tmp_path: Path) -> Job:
    environ = {"STOKER_AUDIT_DIR": str(tmp_path / "audit")}
    return Job(JobEnvironment.read(environ, tmp_path / "out", checkpoint_every_s=3600.0))


def lines(tmp_path: Path) -> list[tuple[int, int, int]]:
    text = (tmp_path / "audit" / "rank0.txt").read_text()
    return [(int(e), int(i), int(o)) for e, i, o in (line.split() for line in text.splitlines())]


def test_each_sample_handed_out_is_one_line_with_its_batch_offset(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(10), batch_size=4, shuffle=False)
    sdk.loader(Numbers(3), batch_size=1)  # only the job's first loader is audited
    for _ in sdk.epochs(2):
        for _ in loader:
            pass
    offsets = [0] * 4 + [4] * 4 + [8] * 2
    assert lines(tmp_path) == [
        (e, i, o) for e in (0, 1) for i, o in zip(range(10), offsets, strict=True)
    ]


def test_a_run_from_a_checkpoint_drops_what_came_after_it(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(12), batch_size=4, shuffle=False)
    for step, _ in enumerate(loader):
        if step == 0:
            sdk.checkpoint()  # at 4 samples
        if step == 1:
            break  # a crash after the second batch was handed out, before a checkpoint
    assert len(lines(tmp_path)) == 8
    with (tmp_path / "audit" / "rank0.txt").open("a") as audit:
        audit.write("0 9")  # and a line cut by it

    again = job(tmp_path)
    rest = again.loader(Numbers(12), batch_size=4, shuffle=False)
    assert lines(tmp_path) == [(0, i, 0) for i in range(4)], "rolled back to the checkpoint"
    for _ in again.epochs(1):
        for _ in rest:
            pass
    assert [i for _, i, _ in lines(tmp_path)] == list(range(12))


def test_an_audit_from_the_start_of_a_job_is_empty(tmp_path: Path) -> None:
    (tmp_path / "rank1.txt").write_text("0 5 0\n")  # a run that never checkpointed
    Audit.resume(tmp_path, rank=1, epoch=0, consumed=0)
    assert (tmp_path / "rank1.txt").read_text() == ""
