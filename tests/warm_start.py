"""A warm start for the commands tests run: a fork server that has imported torch.

Each ``layerscope`` command a docs page runs is a fresh process, and two thirds of a small
command's CPU time is importing torch (about 2.3 CPU-seconds of 3.5). The examples' runner puts
a folder first on ``PATH`` whose ``layerscope`` is a small client (Python without ``site``, a few
milliseconds): it hands its arguments, folder, environment and its standard input, output and
error (the descriptors themselves, over a Unix socket) to the server, which forks a child that
runs the real entry point in them. The child is a new process with the command's own
descriptors, folder and environment, so pipes, redirections, exit codes and signals behave as
in a cold start; only the imports are done once. A second client, ``python`` (``Server.python``,
not put on ``PATH``), runs ``python SCRIPT ARGS`` and ``python -m MODULE ARGS`` the same way: the
docs' ``python`` blocks and the tests of ``layerscope run`` use it; any other form of the command
runs the real python.

What the child does is what the interpreter does: ``sys.argv``, ``sys.path[0]`` (the script's
folder, the working directory for ``-m``), a fresh ``__main__``, standard streams on the given
descriptors with the interpreter's buffering, SIGPIPE ignored and SIGINT raising
KeyboardInterrupt; at the end the non-daemon threads are joined, the atexit functions run and
the streams flushed (a failed flush of stdout is exit status 120), and an unhandled
KeyboardInterrupt ends the process by SIGINT. What can differ is what is read while starting and
importing: a command whose interpreter, OpenMP, MKL, torch, allocator or locale variables differ
from the server's is exec'ed cold in the child instead; the modules the server imported
(``PRELOAD_DOCS``, ``PRELOAD_RUN``) are already in ``sys.modules``. ``LAYERSCOPE_DOCS_COLD=1``
runs the docs' commands cold.

The client's exit status is the command's; a command killed by a signal kills the client with
the same signal; a signal sent to the client (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)
is passed on to the command. When the client goes away (killed, or its group killed on a
timeout) the server kills the command's whole process group.

    python tests/warm_start.py serve SOCKET [MODULE,...]   # the server (the tests start it)
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ENV_SOCKET = "LAYERSCOPE_WARM_SOCKET"
ENV_CPU_LOG = "LAYERSCOPE_WARM_CPU_LOG"
_LEN = struct.Struct("!I")
# What the interpreter and the libraries it loads read from the environment while starting or
# importing (sys.path, the streams' encoding, warning filters, OpenMP's and MKL's thread counts,
# the allocator, torch's own settings, the locale): a command whose values differ from the
# server's is started cold instead, with exec in the forked child.
_STARTUP_VARIABLES = re.compile(r"(PYTHON\w*|OMP_\w+|GOMP_\w+|KMP_\w+|MKL_\w+|OPENBLAS_\w+|"
                                r"TORCH\w*|PYTORCH\w*|CUDA\w*|LD_\w+|MALLOC_\w+|LC_\w+|LANG|"
                                r"LANGUAGE)")
# The signals a client passes on to its command (a test's send_signal, a shell's kill).
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
# Python without site (the client imports only the standard library), so it starts in
# milliseconds; it runs the real command when the server is not there (and the python client
# for any form but SCRIPT and -m MODULE). The forwarded signals are held from the connection
# until the command's pid is known, so none is lost or kills the client in between.
CLIENT = '''import json, os, signal, socket, struct, sys
REAL = {real!r}
MODE = {mode!r}
FORWARD = [getattr(signal, name) for name in {forwarded!r}]
# the signals this client was started with ignored (a shell's background job ignores SIGINT),
# which a cold interpreter keeps ignored; the interpreter ignores SIGPIPE and SIGXFSZ itself
IGNORED = [int(s) for s in signal.valid_signals()
           if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ)
           and signal.getsignal(s) == signal.SIG_IGN]
args = sys.argv[1:]
def cold():
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARD)
    os.execv(REAL[0], REAL + args)
if MODE == "python" and not (args[:1] == ["-m"] and len(args) > 1
                             or args and not args[0].startswith("-")):
    cold()
signal.pthread_sigmask(signal.SIG_BLOCK, FORWARD)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(os.environ.get({env!r}) or "")
except OSError:
    cold()
head = json.dumps({{"mode": MODE, "argv": args, "cwd": os.getcwd(),
                   "env": dict(os.environ), "ignored": IGNORED}}).encode()
socket.send_fds(s, [struct.pack("!I", len(head)) + head], [0, 1, 2])
def receive():
    reply = b""
    while len(reply) < 8:
        chunk = s.recv(8 - len(reply))
        if not chunk:
            os._exit(255)
        reply += chunk
    return struct.unpack("!ii", reply)
kind, pid = receive()
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
for sig in FORWARD:
    signal.signal(sig, forward)
signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARD)
kind, value = receive()
if kind == 1:
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARD)
    signal.signal(value, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [value])
    os.kill(os.getpid(), value)
os._exit(value)
'''


def write_client(folder: Path, name: str = "layerscope") -> Path:
    """A command ``name`` in ``folder`` that runs in the warm server: ``layerscope`` (the
    console script) or ``python``."""
    mode = "python" if name == "python" else "cli"
    real = [sys.executable] if mode == "python" else [sys.executable, "-m", "layerscope"]
    path = folder / name
    path.write_text(f"#!{sys.executable} -S\n" + CLIENT.format(
        real=real, mode=mode, env=ENV_SOCKET, forwarded=FORWARDED))
    path.chmod(0o755)
    return path


# What a server imports before it forks: the docs' commands share torch and torchvision; a
# script under ``layerscope run`` gets no module the cold command would not have imported
# before the script starts (torch, layerscope's command line).
PRELOAD_DOCS = ("torch", "torchvision", "layerscope.cli.main")
PRELOAD_RUN = ("torch", "layerscope.cli.main")


def python_for(env: dict[str, str]) -> str:
    """The python that runs ``python SCRIPT`` in ``env``: the warm client where ``env`` names a
    server (``Server.env``), else this interpreter."""
    socket_path = env.get(ENV_SOCKET)
    client = os.path.join(os.path.dirname(socket_path), "bin", "python") if socket_path else ""
    return client if client and os.path.exists(client) else sys.executable


class Server:
    """The fork server as a child process of the tests, with its socket in ``folder``; it
    imports ``preload`` in ``env``."""

    def __init__(self, folder: Path, env: dict[str, str],
                 preload: tuple[str, ...] = PRELOAD_DOCS):
        self.socket = str(folder / "warm.sock")
        self.bin = folder / "bin"
        self.bin.mkdir(exist_ok=True)
        write_client(self.bin)
        self.python = str(write_client(self.bin, "python"))
        self.proc = subprocess.Popen([sys.executable, __file__, "serve", self.socket,
                                      ",".join(preload)], env=env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 300  # importing torch on a loaded machine
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the warm-start server did not start")
            time.sleep(0.05)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the ``layerscope`` client first on PATH and the socket named (the
        ``python`` client is not on PATH: ``self.python`` is its path)."""
        return {**env, "PATH": os.pathsep.join([str(self.bin), env.get("PATH", "")]),
                ENV_SOCKET: self.socket}

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


COLD_RUN = "LAYERSCOPE_RUN_COLD"
_shared: list[Server] = []


def layerscope_command(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``python -m layerscope ARGV`` in ``env`` for a test of a command that runs a script: the
    argv and environment that run it through the test process's shared server (started on
    first use, with ``env``, importing ``PRELOAD_RUN``; ``close_shared`` stops it), or cold
    where ``LAYERSCOPE_RUN_COLD=1``."""
    command = ["-m", "layerscope", *argv]
    if os.environ.get(COLD_RUN) == "1":
        return [sys.executable, *command], env
    if not _shared:
        import tempfile
        _shared.append(Server(Path(tempfile.mkdtemp(prefix="layerscope-warm-")), env,
                              PRELOAD_RUN))
    server = _shared[0]
    return [server.python, *command], {**env, ENV_SOCKET: server.socket}


def python_command(argv: list[str] | tuple[str, ...],
                   env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``python ARGV`` in ``env``: ``python -m layerscope ...`` through the shared server
    (``layerscope_command``), any other command (the bare script, torchrun) cold."""
    if list(argv[:2]) == ["-m", "layerscope"]:
        return layerscope_command(list(argv[2:]), env)
    return [sys.executable, *argv], env


def close_shared() -> None:
    """Stop the shared server, if one was started, and remove its folder."""
    import shutil
    while _shared:
        server = _shared.pop()
        server.close()
        shutil.rmtree(server.bin.parent, ignore_errors=True)


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while len(data) < _LEN.size or len(data) < _LEN.size + _LEN.unpack(data[:_LEN.size])[0]:
        more = conn.recv(1 << 20)
        if not more:
            raise ConnectionError("the client went away mid-request")
        data += more
    n = _LEN.unpack(data[:_LEN.size])[0]
    return json.loads(data[_LEN.size:_LEN.size + n]), fds


_STARTED_WITH: dict[str, str] = {}  # the server's startup variables


def _startup(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if _STARTUP_VARIABLES.fullmatch(k)}


def _real_argv(request: dict) -> list[str]:
    if request.get("mode") == "python":
        return [sys.executable, *request["argv"]]
    return [sys.executable, "-m", "layerscope", *request["argv"]]


def _print_exception(exc: BaseException) -> None:
    """The traceback the interpreter prints, without this module's frames (runpy's stay, as
    under ``python -m``)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # it shows the exception's own


def _flush_std_files() -> bool:
    """As the interpreter's exit: flush stdout, then stderr (unless None or closed); a failed
    flush of stdout is reported as an unraisable exception. False when one failed."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception as failed:
            ok = False
            if stream is sys.stdout:
                sys.unraisablehook(_Unraisable(type(failed), failed, failed.__traceback__,
                                               None, stream))
    return ok


class _Unraisable:
    def __init__(self, exc_type, exc_value, exc_traceback, err_msg, obj):
        self.exc_type, self.exc_value, self.exc_traceback = exc_type, exc_value, exc_traceback
        self.err_msg, self.object = err_msg, obj


def _std_stream(fd: int, name: str, server):
    """A standard stream on ``fd`` as the interpreter makes it at start-up: the server's
    encoding and errors (its locale and PYTHONIOENCODING are the command's), stdin buffered,
    stdout and stderr written through under ``-u``/PYTHONUNBUFFERED (as the server's own
    ``server`` is), else stdout line-buffered on a terminal and stderr always."""
    import io
    write = fd != 0
    raw = io.FileIO(fd, "w" if write else "r", closefd=False)
    raw.name = name  # type: ignore[misc]  # as the interpreter names it
    unbuffered = server is not None and server.write_through  # -u
    buffer = (io.BufferedReader(raw) if not write else raw if unbuffered
              else io.BufferedWriter(raw))
    stream = io.TextIOWrapper(buffer, encoding=getattr(server, "encoding", None),
                              errors=getattr(server, "errors", None), newline="\n",
                              line_buffering=not unbuffered and write and (fd == 2 or raw.isatty()),
                              write_through=unbuffered)
    stream.mode = "w" if write else "r"  # type: ignore[misc]
    return stream


def _run_main(request: dict) -> None:
    """Run the command's main code as the interpreter would."""
    import importlib.machinery
    import runpy
    import types

    argv = request["argv"]
    if request.get("mode") != "python":
        sys.argv = ["layerscope", *argv]
        sys.path[0] = os.path.dirname(sys.executable)  # as the console script has it
        from layerscope.cli.main import main
        result = main()
        raise SystemExit(result if isinstance(result, int) else 0)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file first
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(argv[1])  # type: ignore[attr-defined]  # what -m calls
        return
    script = os.path.abspath(argv[0])  # __main__'s file is absolute, its argv[0] as given
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    with open(script, "rb") as f:
        code = compile(f.read(), script, "exec")
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(__file__=script, __cached__=None, __builtins__=__builtins__,
                                __loader__=importlib.machinery.SourceFileLoader("__main__",
                                                                                script))
    sys.modules["__main__"] = main_module
    exec(code, main_module.__dict__)


def _run_command(request: dict, fds: list[int]) -> None:
    """In the forked child: become the command, run it, and leave with its exit status."""
    os.setpgid(0, 0)  # its own group: the monitor kills the group when the client goes away
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ignored = request.get("ignored") or ()  # the client's: a cold start keeps them ignored
    os.chdir(request["cwd"])
    if _startup(request["env"]) != _STARTED_WITH:  # read at start or import: start cold
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)
        os.execve(sys.executable, _real_argv(request), request["env"])
    for signum in ignored:
        signal.signal(signum, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.stdin, sys.stdout, sys.stderr = (
        _std_stream(fd, name, server) for fd, name, server in
        ((0, "<stdin>", sys.__stdin__), (1, "<stdout>", sys.__stdout__),
         (2, "<stderr>", sys.__stderr__)))
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    code, interrupted = 0, False
    try:
        _run_main(request)
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt as stop:  # the interpreter prints it, then dies by SIGINT
        _print_exception(stop)
        code, interrupted = 1, True
    except BaseException as failed:  # as the interpreter's top level: the traceback, status 1
        _print_exception(failed)
        code = 1
    import atexit
    import threading
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads
    except KeyboardInterrupt:
        pass
    atexit._run_exitfuncs()
    if not _flush_std_files():
        code = 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def _note_cpu(usage) -> None:
    """Append the command's CPU seconds (its own and its waited-for children's, as a cold
    start's would count in the test's children) to ``LAYERSCOPE_WARM_CPU_LOG``, if named: the
    per-test record of tests/conftest.py adds them to the test that ran the command."""
    log = os.environ.get(ENV_CPU_LOG)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{usage.ru_utime + usage.ru_stime:.3f}\n")


def _monitor(conn: socket.socket) -> None:
    """In a forked monitor: fork the command, tell the client its pid, relay its status, kill
    it if the client leaves."""
    request, fds = _recv_request(conn)
    child = os.fork()
    if child == 0:
        conn.close()
        try:
            _run_command(request, fds)
        finally:
            os._exit(1)  # never back into the server's loop
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(struct.pack("!ii", 2, child))
    except OSError:
        pass
    while True:
        pid, status, usage = os.wait4(child, os.WNOHANG)
        if pid:
            _note_cpu(usage)
            break
        ready, _, _ = select.select([conn], [], [], 0.05)
        if ready and not conn.recv(1):  # the client is gone: so is its command
            try:
                os.killpg(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _note_cpu(os.wait4(child, 0)[2])
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


def serve(path: str, preload: tuple[str, ...] = PRELOAD_DOCS) -> None:
    import importlib

    global _STARTED_WITH
    _STARTED_WITH = _startup(dict(os.environ))  # before the imports (torch sets some)

    for name in preload:
        importlib.import_module(name)
    stopping = []
    signal.signal(signal.SIGTERM, lambda n, f: stopping.append(n))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    listener.settimeout(0.2)
    os.rename(path + ".tmp", path)  # the socket appears only once it accepts
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getppid()
    while not stopping and os.getppid() == parent:  # the tests went away without closing it
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
    if sys.argv[1:2] == ["serve"] and len(sys.argv) in (3, 4):
        serve(sys.argv[2], tuple(filter(None, sys.argv[3].split(","))) if len(sys.argv) == 4
              else PRELOAD_DOCS)
    else:
        sys.exit(__doc__)
