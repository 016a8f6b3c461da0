"""One job rank's output as its terminal shows it: the launcher hands the rank a pipe for
its stdout and one for its stderr, and this process copies each, as it comes, to its own
log (stdout.log, stderr.log) and, line by line in the order they came, to one interleaved
log (stdall.log, each line tagged `o ` or `e `): `stoker logs` reads it in time order, as
`kubectl logs` reads a container runtime's.

It runs as the daemon's user in a session of its own, started by the launcher, which it
leaves at once (a fork whose parent exits: the daemon has no child to reap, now or after
it restarts), and holds no state but the descriptors it was given: the job's signals do
not reach it, a daemon that restarts leaves it be, and it ends when the rank and
everything that inherited its output have exited (end of file on both pipes). Run by
path with `python -S -E`: the standard library only, nothing of the daemon's to import.

    python -S -E logsink.py STDOUT_PIPE STDERR_PIPE STDOUT_LOG STDERR_LOG STDALL_LOG [DONE]

DONE, if given, is a pipe it holds open until it has copied everything: the launcher tells
the job's exit once it closes, so that a failure's reason quotes its last traceback.
A carriage return ends a line in the interleaved log as a newline does: a progress bar's
updates show as they come, not when it ends.
"""

import os
import re
import selectors
import signal
import sys

CHUNK = 65536
LONGEST_LINE = 65536  # a line longer than this goes to the interleaved log in parts
TAGS = (b"o ", b"e ")
_LINE_END = re.compile(rb"\r\n|\r|\n")


def main(argv: list[str]) -> int:
    out_pipe, err_pipe, out_log, err_log, both_log = (int(arg) for arg in argv[:5])
    # argv[5], the launcher's DONE pipe, stays open in this process until it exits.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)  # the job's group's signals are not ours
    if os.fork():
        os._exit(0)  # the launcher waits for this one; the copy goes on in the child
    own_log = {out_pipe: out_log, err_pipe: err_log}
    tag = {out_pipe: TAGS[0], err_pipe: TAGS[1]}
    pending = {out_pipe: b"", err_pipe: b""}
    selector = selectors.DefaultSelector()
    for pipe in own_log:
        selector.register(pipe, selectors.EVENT_READ)
    while selector.get_map():
        for key, _ in selector.select():
            pipe = key.fd
            chunk = os.read(pipe, CHUNK)
            if not chunk:  # every writer is gone
                selector.unregister(pipe)
                if pending[pipe]:
                    write(both_log, tag[pipe] + pending[pipe] + b"\n")
                continue
            write(own_log[pipe], chunk)
            lines = _LINE_END.split(pending[pipe] + chunk)
            pending[pipe] = lines.pop()
            if len(pending[pipe]) > LONGEST_LINE:
                lines.append(pending[pipe])
                pending[pipe] = b""
            if lines:
                write(both_log, b"".join(tag[pipe] + line + b"\n" for line in lines))
    return 0


def write(descriptor: int, data: bytes) -> None:
    """All of `data`, or what a full disk lets through: the rank's output is read on
    whatever its log can keep, so the rank never blocks on a pipe."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(descriptor, view) :]
        except OSError:
            return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
