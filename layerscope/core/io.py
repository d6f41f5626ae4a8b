"""Every file layerscope writes goes through here, so an output never damages what is there.

The rules (docs/design.md, "Output files"; for users docs/reports.md, "Output files and safety"):

- a regular file or a new path: a temporary file in the same folder, fsync, rename; an existing
  file keeps its permission bits, a new one gets the mode ``open()`` would give it (umask);
- a symlink: the file it resolves to is written by the same rule; the link stays a link;
- a character or block device, a FIFO, a socket: opened and written through, never renamed over
  (``-o /dev/stdout``, ``-o >(gzip > r.gz)``; ``/dev/null`` stays a device);
- ``-`` is standard output (binary data is refused when standard output is a terminal);
- anything else (an empty name, a directory, a name ending in ``/``, a missing folder, a name too
  long, no permission, a full disk) is a one-line ``UserError``; the temporary file is removed
  and an old file is left as it was;
- ``outputs()`` groups several outputs: all are put in place when the block ends, or none;
- while a temporary exists, SIGTERM raises ``Terminated`` (a ``SystemExit`` with status 143), so
  the same cleanup that handles errors and Ctrl-C (``KeyboardInterrupt``) removes it.
"""
from __future__ import annotations

import contextlib
import contextvars
import errno
import itertools
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, Union

from layerscope.core.errors import UserError

STDOUT = "-"
TEMP_PREFIX = ".layerscope-"
Data = Union[str, bytes, bytearray, Callable[[BinaryIO], Any]]  # noqa: UP007 - a runtime alias


class Terminated(SystemExit):
    """SIGTERM arrived while a temporary file existed; raised so cleanup runs (exit 128+15)."""


# ---------------------------------------------------------------- where a path leads

def check_output(path: str, what: str = "output", *, within: Iterable[str] = ()) -> str:
    """Validate an output path before any work; returns its kind: "stdout", "special" (device,
    FIFO, socket) or "file" (regular or new). Raises a one-line UserError otherwise.

    ``within``: absolute paths of folders the command creates itself (``train --out DIR``); a
    file whose folder does not exist yet but lies in one of them is accepted when that folder
    can be created (``Outputs.write`` makes it)."""
    if path == STDOUT:
        return "stdout"
    label = "" if what == "output" else f"{what} "
    if not isinstance(path, str) or not path:
        raise UserError(f"{what}: empty file name: give a file name (or - for standard output)")
    if path.endswith(("/", os.sep)):
        raise UserError(f"{what} {path!r} ends in '/': give a file name, not a folder")
    try:  # stat follows links, /dev/fd/N's included (a pipe from `-o >(gzip > x.gz)`)
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None  # the folder is checked below
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UserError(f"cannot write {label}{_short(path)}: the name is too long for this "
                            "file system (at most 255 bytes a name): give a shorter one") from exc
        raise UserError(f"cannot write {label}{path}: {_reason(exc)}") from exc
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UserError(f"{what} {path} is a directory: give a file name")
    if st is not None:
        _not_an_input(path, st, what)
    if st is not None and not stat.S_ISREG(st.st_mode):
        if not os.access(path, os.W_OK):  # a device or FIFO is opened for writing
            raise UserError(f"cannot write {label}{_short(path)}: Permission denied")
        return "special"
    target = resolve(path)
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        if not os.path.exists(folder) and _inside(folder, within):
            _creatable(folder, f"cannot write {label}{_short(path)}")
        else:
            problem = (f"{_short(folder)} is not a directory" if os.path.exists(folder)
                       else f"no such directory {_short(folder)} (create it first)")
            raise UserError(f"cannot write {label}{_short(path)}: {problem}")
    elif not os.access(folder, os.W_OK | os.X_OK):
        # the file is written as a temporary in its folder, then renamed: a read-only folder
        # (or file system) is found now, not after the work the output was for
        raise UserError(f"cannot write {label}{_short(path)}: Permission denied "
                        f"(no permission to create files in {_short(folder)})")
    limit = _name_max(folder)
    name = os.path.basename(target)
    if len(os.fsencode(name)) > limit:
        raise UserError(f"cannot write {label}{_short(path)}: the file name is "
                        f"{len(os.fsencode(name))} bytes long; this file system allows {limit}")
    return "file"


def _inside(folder: str, parents: Iterable[str]) -> bool:
    """Whether ``folder`` (absolute) is one of ``parents`` or below one."""
    return any(folder == p or folder.startswith(p.rstrip(os.sep) + os.sep) for p in parents)


def _creatable(folder: str, failing: str, arguments: tuple[str, ...] = ()) -> None:
    """A missing folder can be made when its nearest existing ancestor is a folder this
    process may write in; else a one-line UserError starting with ``failing``."""
    ancestor = folder
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise UserError(f"{failing}: {_short(ancestor)} is not a folder (give a path inside "
                        "a folder)", arguments=arguments)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UserError(f"{failing}: no permission to create folders in {_short(ancestor)}",
                        arguments=arguments)


def resolve(path: str) -> str:
    """The file a path writes to: symlinks followed (a dangling link: the file it names)."""
    return os.path.realpath(path) if os.path.islink(path) else path


def _is_special(path: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path)
    except OSError:
        return False


def _name_max(folder: str) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _short(path: str, keep: int = 160) -> str:
    """A path fit for a one-line message."""
    return path if len(path) <= keep else f"{path[:keep // 2]}...{path[-keep // 2:]}"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


# ---------------------------------------------------------------- writing one file now

def write_file(path: str, data: Data, *, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` now, by the module's rules.

    ``data``: ``str`` (UTF-8), ``bytes``, or a function that writes to an open binary file
    (``lambda f: torch.save(obj, f)``, ``lambda f: np.savez(f, **arrays)``)."""
    kind = check_output(path)
    if kind == "stdout":
        _write_stdout(data)
    elif kind == "special":
        _write_through(path, data)
    else:
        tmp, target = _write_temp(path, data, fsync)
        try:
            _rename(tmp, target, path)
        finally:
            _guard_exit()


def place(tmp_file: str, path: str, *, fsync: bool = True) -> None:
    """Put a finished file (written elsewhere on the same file system, e.g. by an exporter that
    needs a path) at ``path`` by the same rules; ``tmp_file`` is gone afterwards."""
    kind = check_output(path)
    if kind != "file":
        try:
            write_file(path, lambda f: _copy_from(tmp_file, f))
        finally:
            _unlink(tmp_file)
        return
    target = resolve(path)
    try:
        os.chmod(tmp_file, _mode_for(target))
        if fsync:
            _fsync_path(tmp_file)
        _rename(tmp_file, target, path)
    except BaseException:
        _unlink(tmp_file)
        raise


def _write_temp(path: str, data: Data, fsync: bool) -> tuple[str, str]:
    """A finished temporary file beside the file ``path`` resolves to; the SIGTERM guard is
    entered (the caller exits it once the temporary is renamed or removed)."""
    target = resolve(path)
    folder = os.path.dirname(os.path.abspath(target))
    mode = _mode_for(target)
    _guard_enter()
    try:
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=folder)
    except OSError as exc:
        _guard_exit()
        raise UserError(f"cannot write {path}: {_reason(exc)} ({folder})") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            _write_data(f, data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
    except OSError as exc:
        _unlink(tmp)
        _guard_exit()
        raise UserError(f"cannot write {path}: {_reason(exc)}") from exc
    except BaseException:
        _unlink(tmp)
        _guard_exit()
        raise
    return tmp, target


def _rename(tmp: str, target: str, path: str) -> None:
    try:
        os.replace(tmp, target)
    except OSError as exc:
        _unlink(tmp)
        raise UserError(f"cannot write {path}: {_reason(exc)}") from exc
    except BaseException:
        _unlink(tmp)
        raise


def _write_data(f: BinaryIO, data: Data) -> None:
    if isinstance(data, str):
        f.write(data.encode("utf-8"))
    elif isinstance(data, (bytes, bytearray, memoryview)):
        f.write(data)
    else:
        data(f)


def _write_stdout(data: Data) -> None:
    if isinstance(data, str):
        sys.stdout.write(data)
        sys.stdout.flush()
        return
    if sys.stdout.isatty():
        raise UserError("not writing binary data to a terminal: redirect standard output "
                        "(-o - > FILE) or give a file name")
    out = getattr(sys.stdout, "buffer", None)
    if out is None:
        raise UserError("standard output takes only text here: give a file name")
    sys.stdout.flush()
    _write_data(out, data)
    out.flush()


def _write_through(path: str, data: Data) -> None:
    """Devices, FIFOs and sockets: write into them; never create, truncate or rename."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
                with s.makefile("wb") as f:
                    _write_data(f, data)
            return
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "wb") as f:
            _write_data(f, data)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {_reason(exc)}") from exc


def _mode_for(target: str) -> int:
    """An existing file's permission bits; else what open() would give a new file."""
    try:
        st = os.stat(target)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux 4.7+: read without changing it (os.umask is a process-wide race)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _copy_from(src: str, f: BinaryIO) -> None:
    with open(src, "rb") as s:
        shutil.copyfileobj(s, f)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# ---------------------------------------------------------------- folders

def check_not_input(path: str, what: str = "output") -> None:
    """Refuse an output that is one of the inputs declared with ``Outputs.reads`` (the same
    file, also through a symbolic or hard link): writing it would replace what the command
    reads (``report r.json -o r.json``). ``check_output`` does this too; this alone lets a
    command refuse it before any work, whatever else it checks later."""
    if path == STDOUT or not isinstance(path, str) or not path:
        return
    with contextlib.suppress(OSError, ValueError):
        _not_an_input(path, os.stat(path), what)


def _not_an_input(path: str, st: os.stat_result, what: str) -> None:
    tx = _current.get()
    if tx is not None and (st.st_dev, st.st_ino) in tx.inputs:
        raise UserError(f"{what} {path} is also one of the command's inputs "
                        f"({tx.inputs[st.st_dev, st.st_ino]}): writing it would replace what "
                        "the command reads; give another file name")


def check_dir(path: str, what: str = "output folder") -> str:
    """Validate a folder to write into, before any work: an existing folder, or a new one that
    can be created (its nearest existing ancestor is a writable folder, not a file). Returns
    its absolute path. ``what``: a description, an option (``--out``) or the API's argument
    (``out``, recorded as the error's ``arguments``)."""
    names = (what,) if what.isidentifier() else ()
    if not path:
        raise UserError(f"{what}: empty name: give a folder name", arguments=names)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{what} {path} exists and is not a folder: give a new or existing "
                        "folder name", arguments=names)
    full = os.path.abspath(path)
    if not os.path.isdir(full):
        _creatable(full, f"cannot create {what} {_short(path)}", names)
    return full


def make_dir(path: str, what: str = "output folder") -> str:
    """Create a folder (and its parents) for outputs; a one-line UserError if it cannot be one
    (an existing file, no permission, an empty name). Returns ``path``."""
    check_dir(path, what)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {what} {path}: {_reason(exc)}",
                        arguments=(what,) if what.isidentifier() else ()) from exc
    return path


@contextlib.contextmanager
def temp_dir(near: str | None = None) -> Iterator[str]:
    """A temporary folder (in the folder of the file ``near`` resolves to, so that renames stay
    on one file system; else the system's), removed on exit, on errors, Ctrl-C and SIGTERM."""
    folder = (os.path.dirname(os.path.abspath(resolve(near)))
              if near and not _is_special(near) else None)  # a pipe has no folder of its own
    _guard_enter()
    try:
        try:
            tmpdir = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=folder)
        except OSError as exc:
            raise UserError(f"cannot write {near or 'a temporary folder'}: {_reason(exc)} "
                            f"({folder or tempfile.gettempdir()})") from exc
        try:
            yield tmpdir
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
    finally:
        _guard_exit()


# ---------------------------------------------------------------- several outputs: all or none

_current: contextvars.ContextVar[Outputs | None] = contextvars.ContextVar(
    "layerscope_outputs", default=None)


class Outputs:
    """A command's outputs, put in place together when the ``outputs()`` block ends.

    ``write`` prepares a file now (a temporary beside it) and renames it at ``commit``; devices,
    FIFOs and standard output are written at commit (they cannot be taken back). If anything
    fails before or during commit, every temporary is removed and files already renamed get
    their old content back."""

    def __init__(self) -> None:
        self._files: list[tuple[str, str, str]] = []   # (temporary, target, path as given)
        self._streams: list[tuple[str, Data]] = []     # (path or "-", data)
        self._after: list[Callable[[], None]] = []
        self._guarded = False
        self._creates: list[str] = []  # folders the command makes (absolute)
        self._made: list[str] = []     # folders made here for an output, removed on rollback
        self.inputs: dict[tuple[int, int], str] = {}  # (device, inode) -> the input as given
        # an output path the command made absolute (a script may change directory) -> the
        # path as the user gave it, which messages show
        self.shown: dict[str, str] = {}

    def reads(self, *paths: str) -> None:
        """Declare files the command reads: ``check_output`` (and so ``write``) refuses an
        output that is one of them (the same file, also through a link or a hard link)."""
        for path in paths:
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                continue  # not a file: nothing an output could replace
            self.inputs.setdefault((st.st_dev, st.st_ino), path)

    def creates(self, folder: str) -> None:
        """Declare a folder the command creates itself (``train --out DIR``): an output inside
        it is accepted before the folder exists, and its missing folders are made when it is
        written."""
        self._creates.append(os.path.abspath(folder))

    def write(self, path: str, data: Data, *, fsync: bool = True) -> None:
        if check_output(path, within=self._creates) == "file":
            self._make_folders(os.path.dirname(os.path.abspath(resolve(path))))
            tmp, target = _write_temp(path, data, fsync)
            if self._guarded:
                _guard_exit()  # one guard for the whole transaction
            self._guarded = True
            self._files.append((tmp, target, path))
        else:
            self._streams.append((path, data))

    def _make_folders(self, folder: str) -> None:
        missing = []
        while not os.path.isdir(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        for new in reversed(missing):
            try:
                os.mkdir(new)
            except FileExistsError:
                continue
            except OSError as exc:
                raise UserError(f"cannot create folder {_short(new)}: {_reason(exc)}") from exc
            self._made.append(new)

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once everything is in place (e.g. print "wrote FILE")."""
        self._after.append(fn)

    def commit(self) -> None:
        done: list[tuple[str, str | None]] = []  # (target, backup of its old content)
        try:
            for tmp, target, path in self._files:
                backup = _backup(target)
                try:
                    _rename(tmp, target, path)
                except BaseException:
                    if backup:
                        _unlink(backup)
                    raise
                done.append((target, backup))
            self._files = []
            for path, data in self._streams:
                write_file(path, data)
            self._streams = []
        except BaseException:
            for target, backup in reversed(done):
                if backup:
                    os.replace(backup, target)
                else:
                    _unlink(target)
            self.rollback()
            raise
        for _, backup in done:
            if backup:
                _unlink(backup)
        self._made = []
        self._release()
        after, self._after = self._after, []
        for fn in after:
            fn()

    def rollback(self) -> None:
        for tmp, _, _ in self._files:
            _unlink(tmp)
        for folder in reversed(self._made):  # only the ones still empty
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        self._files, self._streams, self._after, self._made = [], [], [], []
        self._release()

    def _release(self) -> None:
        if self._guarded:
            self._guarded = False
            _guard_exit()


_backups = itertools.count()


def _backup(target: str) -> str | None:
    """A hard link to the current file, so a failed commit can restore it (best effort)."""
    if not os.path.isfile(target):
        return None
    backup = os.path.join(os.path.dirname(os.path.abspath(target)),
                          f"{TEMP_PREFIX}backup-{os.getpid()}-{next(_backups)}")
    try:
        _unlink(backup)
        os.link(target, backup)
    except OSError:
        return None
    return backup


@contextlib.contextmanager
def outputs() -> Iterator[Outputs]:
    """``with outputs() as tx: tx.write(a, ...); tx.write(b, ...)``: both files or neither.
    Nested blocks join the outer one."""
    outer = _current.get()
    if outer is not None:
        yield outer
        return
    tx = Outputs()
    token = _current.set(tx)
    try:
        yield tx
    except BaseException:
        tx.rollback()
        raise
    finally:
        _current.reset(token)
    tx.commit()


def current() -> Outputs | None:
    """The ``outputs()`` transaction in progress, if any."""
    return _current.get()


# ---------------------------------------------------------------- SIGTERM while temporaries exist

_guard_lock = threading.Lock()
_guard_depth = 0
_guard_previous: Any = None


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated(128 + signum)


def _guard_enter() -> None:
    """Make SIGTERM raise ``Terminated`` until the matching ``_guard_exit`` (only where Python
    can install handlers: the main thread, and only over the default action)."""
    global _guard_depth, _guard_previous
    with _guard_lock:
        _guard_depth += 1
        if _guard_depth > 1 or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_DFL:
            _guard_previous = previous
            signal.signal(signal.SIGTERM, _on_sigterm)


def _guard_exit() -> None:
    global _guard_depth, _guard_previous
    with _guard_lock:
        _guard_depth = max(0, _guard_depth - 1)
        if _guard_depth or _guard_previous is None:
            return
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _guard_previous)
            _guard_previous = None


__all__ = ["STDOUT", "TEMP_PREFIX", "Outputs", "Terminated", "check_dir", "check_not_input",
           "check_output", "current",
           "make_dir", "outputs", "place", "resolve", "temp_dir", "write_file"]
