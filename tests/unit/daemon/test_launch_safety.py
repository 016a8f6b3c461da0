"""What a launch looks at and enters, as whom (issue 37, findings 3, 8 and the launch half
of 2): a job's workdir is entered as its user, a link swapped after the submit leads it
nowhere, a failure's reason says nothing its user may not see, and a launch that failed for
the node's lack (EMFILE) is the daemon's, not the job's."""

import errno
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from daemon.config import TenantPolicy
from daemon.exitreason import launch_failure
from daemon.items import SubmitError
from daemon.launcher import Launcher, RankProcess
from daemon.spawn import WorkdirError, daemons_own
from daemon.tenants import UnixUser
from daemon.workdirs import checked_workdir

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="jobs change user only under root")
_NOBODY = pwd.getpwnam("nobody")
NOBODY = UnixUser("nobody", _NOBODY.pw_uid, _NOBODY.pw_gid, _NOBODY.pw_dir)


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder `nobody` may pass (pytest's own is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="stoker-launch-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def rank(argv: Sequence[str], workdir: Path, user: UnixUser | None = NOBODY) -> RankProcess:
    return RankProcess(argv=argv, env={"PATH": "/usr/bin:/bin"}, workdir=workdir, user=user)


def closed_and_open(tmp_path: Path) -> tuple[Path, Path]:
    """A folder of root's that no other user may enter, with a secret in it, and one that
    every user may enter."""
    closed = tmp_path / "bob"
    closed.mkdir(mode=0o700)
    (closed / "run.sh").write_text("#!/opt/bobs-secret-interpreter\n")
    (closed / "run.sh").chmod(0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)  # whatever the umask: an in-process Service leaves 077
    tmp_path.chmod(0o711)
    return closed, shared


@as_root
def test_a_workdir_its_user_may_not_enter_fails_the_launch_naming_it(tmp_path: Path) -> None:
    closed, _ = closed_and_open(tmp_path)
    launcher = Launcher(tmp_path / "jobs")
    with pytest.raises(WorkdirError) as raised:
        launcher.launch_ranks("j", [rank(["cat", "run.sh"], closed)])
    assert raised.value.filename == str(closed) and raised.value.errno == errno.EACCES
    why = launch_failure(raised.value, ["cat", "run.sh"], "/usr/bin:/bin", str(closed), NOBODY)
    assert why.startswith(f"launch failed: the job's user cannot enter its workdir {closed}")
    assert not daemons_own(raised.value), "the job's to fix: it fails as before"


@as_root
def test_a_link_swapped_after_the_submit_leads_the_launch_nowhere(tmp_path: Path) -> None:
    closed, shared = closed_and_open(tmp_path)
    closed.chmod(0o755)  # even where its user could enter it: not where the submit said
    link = tmp_path / "link"
    link.symlink_to(shared)
    stored = checked_workdir(str(link), TenantPolicy(workdir_roots=[shared]), NOBODY, "alice")
    assert stored == str(shared), "the folder it resolves to is what is stored"
    link.unlink()
    link.symlink_to(closed)
    with pytest.raises(WorkdirError, match="leads to"):
        Launcher(tmp_path / "jobs").launch_ranks("j", [rank(["cat", "run.sh"], link)])


@as_root
def test_a_workdir_its_user_may_not_enter_is_refused_at_submit_as_if_missing(
    tmp_path: Path,
) -> None:
    closed, shared = closed_and_open(tmp_path)
    anywhere = TenantPolicy()
    assert checked_workdir(str(shared), anywhere, NOBODY, "alice") == str(shared)
    said = []
    for folder in (closed, tmp_path / "absent"):
        with pytest.raises(SubmitError) as raised:
            checked_workdir(str(folder), anywhere, NOBODY, "alice")
        said.append(str(raised.value).replace(str(folder), "X"))
    assert said[0] == said[1], "a refusal does not tell a closed folder from a missing one"


@as_root
def test_a_launch_failure_tells_nothing_of_a_file_its_user_may_not_read(tmp_path: Path) -> None:
    closed, shared = closed_and_open(tmp_path)
    (shared / "run.sh").symlink_to(closed / "run.sh")
    error = FileNotFoundError(errno.ENOENT, "No such file or directory", "./run.sh")
    why = launch_failure(error, ["./run.sh"], "/usr/bin:/bin", str(shared), NOBODY)
    assert "secret" not in why and "is there" not in why, why
    assert "does not exist" in why
    # Its own user sees its own file's first line, as before.
    (shared / "mine.sh").write_text("#!/opt/missing-interpreter\n")
    (shared / "mine.sh").chmod(0o644)
    error = FileNotFoundError(errno.ENOENT, "No such file or directory", "./mine.sh")
    why = launch_failure(error, ["./mine.sh"], "/usr/bin:/bin", str(shared), NOBODY)
    assert "'/opt/missing-interpreter'" in why, why


_OUT_OF_FILES = """
import json, resource, sys
from pathlib import Path
from daemon.launcher import Launcher, RankProcess
from daemon.spawn import daemons_own
launcher = Launcher(Path(sys.argv[1]))
used = len(list(Path("/proc/self/fd").iterdir()))
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 3, hard))
try:
    launcher.launch_ranks("j", [RankProcess(argv=["true"], env={"PATH": "/usr/bin:/bin"})])
    print(json.dumps({"errno": None}))
except OSError as error:
    print(json.dumps({"errno": error.errno, "daemons_own": daemons_own(error)}))
"""


def test_a_launch_out_of_file_descriptors_is_the_daemons_not_the_jobs(tmp_path: Path) -> None:
    """A real EMFILE: the launching process's own open-file limit, lowered just above what
    it holds open."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _OUT_OF_FILES, str(tmp_path / "jobs")],
        capture_output=True, text=True, timeout=60, check=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"errno": errno.EMFILE, "daemons_own": True}, done.stderr
