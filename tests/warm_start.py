"""A warm start for the commands the docs' examples run: a fork server that has imported torch.

Each ``layerscope`` command a page runs is a fresh process, and two thirds of a small command's
CPU time is importing torch (about 2.3 CPU-seconds of 3.5). The examples' runner puts a folder
first on ``PATH`` whose ``layerscope`` is a small client (Python without ``site``, a few
milliseconds): it hands its arguments, folder, environment and its standard input, output and
error (the descriptors themselves, over a Unix socket) to the server, which forks a child that
runs the real entry point in them. The child is a new process with the command's own
descriptors, folder and environment, so pipes, redirections, exit codes and signals behave as
in a cold start; only the imports are done once. What can differ is what a module reads from
the environment when it is imported: the server is started with the examples' environment, so
only a variable set on the command line for a module already imported would not be seen (none
of the pages does that). ``LAYERSCOPE_DOCS_COLD=1`` runs every command cold instead.

The client's exit status is the command's; a command killed by a signal kills the client with
the same signal. When the client goes away (its group is killed on a timeout) the server kills
the command's whole process group.

    python tests/warm_start.py serve SOCKET     # the server (the tests start it)
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ENV_SOCKET = "LAYERSCOPE_WARM_SOCKET"
_LEN = struct.Struct("!I")
# Python without site (the client imports only the standard library), so it starts in
# milliseconds; it falls back to the real command when the server is not there.
CLIENT = '''import json, os, signal, socket, struct, sys
REAL = {real!r}
path = os.environ.get({env!r})
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(path or "")
except OSError:
    os.execv(REAL[0], REAL + sys.argv[1:])
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda n, f: os._exit(128 + n))  # the server sees the socket close
head = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(s, [struct.pack("!I", len(head)) + head], [0, 1, 2])
reply = b""
while len(reply) < 8:
    chunk = s.recv(8 - len(reply))
    if not chunk:
        os._exit(255)
    reply += chunk
kind, value = struct.unpack("!ii", reply)
if kind == 1:
    signal.signal(value, signal.SIG_DFL)
    os.kill(os.getpid(), value)
os._exit(value)
'''


def write_client(folder: Path) -> Path:
    """A ``layerscope`` in ``folder`` that runs its command in the warm server."""
    real = [sys.executable, "-m", "layerscope"]
    path = folder / "layerscope"
    path.write_text(f"#!{sys.executable} -S\n" + CLIENT.format(real=real, env=ENV_SOCKET))
    path.chmod(0o755)
    return path


class Server:
    """The fork server as a child process of the tests, with its socket in ``folder``."""

    def __init__(self, folder: Path, env: dict[str, str]):
        self.socket = str(folder / "warm.sock")
        self.bin = folder / "bin"
        self.bin.mkdir(exist_ok=True)
        write_client(self.bin)
        self.proc = subprocess.Popen([sys.executable, __file__, "serve", self.socket], env=env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 300  # importing torch on a loaded machine
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the warm-start server did not start")
            time.sleep(0.05)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the client first on PATH and the socket named."""
        return {**env, "PATH": os.pathsep.join([str(self.bin), env.get("PATH", "")]),
                ENV_SOCKET: self.socket}

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while len(data) < _LEN.size or len(data) < _LEN.size + _LEN.unpack(data[:_LEN.size])[0]:
        more = conn.recv(1 << 20)
        if not more:
            raise ConnectionError("the client went away mid-request")
        data += more
    n = _LEN.unpack(data[:_LEN.size])[0]
    return json.loads(data[_LEN.size:_LEN.size + n]), fds


def _run_command(request: dict, fds: list[int]) -> None:
    """In the forked child: become the command, run it, and leave with its exit status."""
    os.setpgid(0, 0)  # its own group: the monitor kills the group when the client goes away
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import io
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False),
                                  line_buffering=os.isatty(1), write_through=False)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False),
                                  line_buffering=True, errors="backslashreplace")
    sys.argv = ["layerscope", *request["argv"]]
    sys.path[0] = os.path.dirname(sys.executable)  # as the console script has it
    code = 0
    try:
        from layerscope.cli.main import main
        result = main()
        code = result if isinstance(result, int) else 0
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # as Python's own top level does: the traceback, then status 1
        sys.excepthook(*sys.exc_info())
        code = 1
    import atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


def _monitor(conn: socket.socket) -> None:
    """In a forked monitor: fork the command, relay its status, kill it if the client leaves."""
    request, fds = _recv_request(conn)
    child = os.fork()
    if child == 0:
        conn.close()
        _run_command(request, fds)
    for fd in fds:
        os.close(fd)
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        ready, _, _ = select.select([conn], [], [], 0.05)
        if ready and not conn.recv(1):  # the client is gone: so is its command
            try:
                os.killpg(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(child, 0)
            os._exit(0)
    kind, value = ((1, os.WTERMSIG(status)) if os.WIFSIGNALED(status)
                   else (0, os.WEXITSTATUS(status)))
    try:
        conn.sendall(struct.pack("!ii", kind, value))
    except OSError:
        pass
    os._exit(0)


def _reap(block: bool) -> None:
    """Wait for finished monitors (their CPU time then counts as the server's children's, as a
    cold start's would count as the test's)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(path: str) -> None:
    import torch  # noqa: F401  the import the commands share
    import torchvision  # noqa: F401

    import layerscope.cli.main  # noqa: F401
    stopping = []
    signal.signal(signal.SIGTERM, lambda n, f: stopping.append(n))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    listener.settimeout(0.2)
    os.rename(path + ".tmp", path)  # the socket appears only once it accepts
    sys.stdout.flush()
    sys.stderr.flush()
    while not stopping:
        _reap(block=False)
        try:
            conn, _ = listener.accept()
        except (TimeoutError, InterruptedError):
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _monitor(conn)
        conn.close()
    _reap(block=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) == 3:
        serve(sys.argv[2])
    else:
        sys.exit(__doc__)
