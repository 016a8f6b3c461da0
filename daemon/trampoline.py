"""The first program of every job process: run by the daemon's interpreter as the daemon's
user (`python -I -S trampoline.py`, no environment of the job's), it joins the job's cgroup,
becomes the job's user, changes to its workdir as that user, checks that it landed where the
submit resolved, and executes the job's command with the job's environment.

Why not Popen's own `cwd=` and `user=`: CPython changes directory before it changes user, as
root, so a tenant's workdir could lead into a folder its user may not enter; and nothing
between fork and exec could join a cgroup. What it is told comes on a pipe (`daemon/spawn.py`
writes it), what went wrong goes back on another, closed by a successful exec; so a failure
is the OSError Popen would have raised, with the step that failed. Standard library only: it
runs isolated, before the job's environment exists."""

import json
import os
import sys

# `os.execvpe` imports `warnings` on its way (os.get_exec_path): by then the process is the
# job's user, who may not read the daemon's Python (a pyenv under /root, say).
import warnings  # noqa: F401


def main() -> None:
    told, answer = int(sys.argv[1]), int(sys.argv[2])
    os.set_inheritable(answer, False)  # closed by the exec: its end tells the daemon it ran
    with os.fdopen(told, "rb") as pipe:
        payload = json.loads(pipe.read())
    argv: list[str] = payload["argv"]
    step, filename = "cgroup", payload.get("cgroup") or ""
    try:
        if payload.get("cgroup"):
            with open(os.path.join(payload["cgroup"], "cgroup.procs"), "w") as procs:
                procs.write("0\n")  # this process; what it starts inherits it
        step, filename = "user", ""
        if payload.get("uid") is not None:
            os.setgroups([])
            os.setgid(payload["gid"])
            os.setuid(payload["uid"])
        workdir = payload.get("workdir")
        if workdir:
            step, filename = "workdir", workdir
            os.chdir(workdir)  # as the job's user: a folder it may not enter stays shut
            if os.getcwd() != workdir:  # a link on the way changed since the submit
                raise OSError(0, f"leads to {os.getcwd()} since it was submitted", workdir)
        step, filename = "exec", argv[0]
        os.execvpe(argv[0], argv, payload["env"])
    except OSError as error:
        said = {"step": step, "errno": error.errno, "filename": filename}
        if step == "workdir" and error.errno == 0:
            said["strerror"] = error.strerror
        os.write(answer, json.dumps(said).encode())
        os._exit(127)


if __name__ == "__main__":
    main()
