"""core.io: every output goes through one writer that never damages what is at the path.

Special files are made inside tmp_path (never /dev/null itself): a (1, 3) character device made
with os.mknod behaves like /dev/null."""
from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

from layerscope.core import io as lio
from layerscope.core.errors import UserError
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temporaries(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(lio.TEMP_PREFIX)]


def _char_device(path: Path) -> Path:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a null device of our own
    except PermissionError:
        pytest.skip("this OS does not let us make a character device")
    return path


def _is_char_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


def _full_disk(f):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# ------------------------------------------------------------------ regular files and links

@pytest.mark.parametrize("old_mode", [None, 0o600, 0o640, 0o755],
                         ids=["new-file-umask", "existing-0600", "existing-0640", "existing-0755"])
@pytest.mark.parametrize("data", ["text ü\n", b"\x00bytes", lambda f: f.write(b"callable")],
                         ids=["str", "bytes", "callable"])
def test_regular_file_written_atomically_mode_kept(tmp_path, old_mode, data):
    path = tmp_path / "out.txt"
    if old_mode is not None:
        path.write_text("old")
        os.chmod(path, old_mode)
    lio.write_file(str(path), data)
    expected = {str: "text ü\n".encode(), bytes: b"\x00bytes"}.get(type(data), b"callable")
    assert path.read_bytes() == expected
    want_mode = old_mode if old_mode is not None else 0o666 & ~_umask()
    assert stat.S_IMODE(os.stat(path).st_mode) == want_mode
    assert _temporaries(tmp_path) == []


@pytest.mark.parametrize("dangling", [False, True], ids=["link-to-file", "dangling-link"])
def test_symlink_stays_a_link_and_its_target_is_written(tmp_path, dangling):
    target = tmp_path / "real.json"
    if not dangling:
        target.write_text("old")
        os.chmod(target, 0o600)
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    lio.write_file(str(link), "new")
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == (0o666 & ~_umask() if dangling else 0o600)
    assert _temporaries(tmp_path) == []


# ------------------------------------------------------------------ devices, FIFOs, stdout

@pytest.mark.parametrize("data", ["text", b"bytes", lambda f: f.write(b"callable")],
                         ids=["str", "bytes", "callable"])
def test_char_device_is_written_through_and_stays_a_device(tmp_path, data):
    dev = _char_device(tmp_path / "null")
    lio.write_file(str(dev), data)
    assert _is_char_device(dev)
    assert sorted(os.listdir(tmp_path)) == ["null"]


def test_link_to_a_char_device_stays_a_link(tmp_path):
    dev = _char_device(tmp_path / "null")
    link = tmp_path / "out"
    link.symlink_to(dev)
    lio.write_file(str(link), "x")
    assert link.is_symlink() and _is_char_device(dev)


def test_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    lio.write_file(str(fifo), "through the pipe\n")
    reader.join(timeout=30)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_fd_link_to_a_pipe_is_written_through():
    # `-o >(gzip > x.gz)` passes /dev/fd/63: a link to "pipe:[N]", which names no real file
    r, w = os.pipe()
    try:
        lio.write_file(f"/proc/self/fd/{w}", "into the pipe")
        os.close(w)
        w = None
        assert os.read(r, 100) == b"into the pipe"
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def test_dash_is_standard_output(capsys):
    lio.write_file("-", "to stdout\n")
    assert capsys.readouterr().out == "to stdout\n"


def test_binary_to_a_terminal_is_refused(monkeypatch):
    class Tty:
        def isatty(self):
            return True

        def write(self, text):  # pragma: no cover - must not be reached
            raise AssertionError("wrote to the terminal")

    monkeypatch.setattr(sys, "stdout", Tty())
    with pytest.raises(UserError, match="terminal"):
        lio.write_file("-", b"\x89PNG")


# ------------------------------------------------------------------ what is refused

def _mkstemp_denied(*args, **kwargs):
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))


BAD = [  # (id, path relative to tmp_path or None for "", setup, data, message fragment)
    ("empty", None, None, "x", "empty file name"),
    ("directory", "adir", "mkdir", "x", "is a directory"),
    ("trailing-slash", "new/", None, "x", "ends in '/'"),
    ("missing-parent", "nowhere/out.json", None, "x", "no such directory"),
    ("parent-is-a-file", "keep.txt/out.json", None, "x", "is not a directory"),
    ("name-too-long", "a" * 300 + ".json", None, "x", "too long"),
    ("full-disk", "keep.txt", None, _full_disk, "No space left on device"),
    ("full-disk-at-fsync", "keep.txt", "fsync-full", "x", "No space left on device"),
    ("no-permission", "keep.txt", "deny", "x", "Permission denied"),
]


@pytest.mark.parametrize("name,setup,data,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_output_is_one_line_and_leaves_everything_as_it_was(tmp_path, monkeypatch, name,
                                                               setup, data, message):
    keep = tmp_path / "keep.txt"
    keep.write_text("old content")
    if setup == "mkdir":
        (tmp_path / name).mkdir()
    if setup == "deny":  # root ignores chmod, so refuse where the temporary is created
        monkeypatch.setattr(tempfile, "mkstemp", _mkstemp_denied)
    if setup == "fsync-full":
        monkeypatch.setattr(os, "fsync", _full_disk)
    path = "" if name is None else os.path.join(str(tmp_path), name)  # keeps a trailing /
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UserError, match=message) as info:
        lio.write_file(path, data)
    assert "\n" not in str(info.value)
    assert "a" * 200 not in str(info.value)  # a 300-character name is shortened
    assert keep.read_text() == "old content"
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_read_only_folder_is_one_line(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o500)
    try:
        with pytest.raises(UserError, match="Permission denied"):
            lio.write_file(str(folder / "x.json"), "x")
    finally:
        os.chmod(folder, 0o700)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_an_output_this_user_cannot_write_is_refused_when_checked(tmp_path, monkeypatch, kind):
    """``check_output`` (every command's check before its work) asks the operating system
    whether this user may create files in the output's folder, or write the FIFO/device it
    names (root passes permission bits, so the answer is faked here; a read-only mount gives
    it for real)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "x.json"
    if kind == "fifo":
        os.mkfifo(path)
    denied = str(path if kind == "fifo" else folder)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (
        False if os.path.abspath(p) == denied and mode & os.W_OK else real(p, mode, **kw)))
    with pytest.raises(UserError, match="Permission denied") as info:
        lio.check_output(str(path))
    assert "\n" not in str(info.value)
    assert lio.check_output(str(tmp_path / "fine.json")) == "file"


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError],
                         ids=["ctrl-c", "bug-in-writer"])
def test_interrupted_write_removes_the_temporary(tmp_path, interrupt):
    path = tmp_path / "out.json"
    path.write_text("old")

    def writer(f):
        f.write(b"half")
        raise interrupt()

    with pytest.raises(interrupt):
        lio.write_file(str(path), writer)
    assert path.read_text() == "old"
    assert _temporaries(tmp_path) == []


def test_sigterm_handler_is_restored_after_a_write(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    lio.write_file(str(tmp_path / "a"), "x")
    with lio.outputs() as tx:
        tx.write(str(tmp_path / "b"), "y")
    with lio.temp_dir(near=str(tmp_path / "c")):
        pass
    assert signal.getsignal(signal.SIGTERM) is before


# ------------------------------------------------------------------ folders

def test_make_dir_refuses_an_existing_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("keep")
    with pytest.raises(UserError, match="exists and is not a folder"):
        lio.make_dir(str(f))
    assert f.read_text() == "keep"
    assert lio.make_dir(str(tmp_path / "a" / "b")) and (tmp_path / "a" / "b").is_dir()


def test_train_out_an_existing_file_is_one_line(tmp_path):
    f = tmp_path / "not-a-folder"
    f.write_text("keep")
    code, _, err = run_cli("train", "--synthetic", "--dry-run", "--out", str(f))
    assert code == 2
    assert err.count("\n") == 1 and "is not a folder" in err
    assert f.read_text() == "keep"


def test_place_keeps_mode_and_follows_links(tmp_path):
    target = tmp_path / "model.onnx"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.onnx"
    link.symlink_to(target.name)
    with lio.temp_dir(near=str(link)) as d:
        made = Path(d) / "model.onnx"
        made.write_text("new")
        lio.place(str(made), str(link))
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert _temporaries(tmp_path) == []


# ------------------------------------------------------------------ several outputs: all or none

def test_outputs_commit_puts_all_in_place(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.html"
    with lio.outputs() as tx:
        tx.write(str(a), "A")
        tx.write(str(b), "B")
        assert not a.exists() and not b.exists()  # nothing is in place before the end
    assert a.read_text() == "A" and b.read_text() == "B"
    assert _temporaries(tmp_path) == []


def test_outputs_roll_back_on_an_error(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.html"
    a.write_text("old a")
    with pytest.raises(UserError):
        with lio.outputs() as tx:
            tx.write(str(a), "new a")
            tx.write(str(tmp_path / "missing" / "b.html"), "B")
    assert a.read_text() == "old a" and not b.exists()
    assert _temporaries(tmp_path) == []


def test_outputs_failing_commit_restores_what_it_renamed(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text("old a")
    with pytest.raises(UserError, match="c.json"):
        with lio.outputs() as tx:
            tx.write(str(a), "new a")
            tx.write(str(b), "new b")
            tx.write(str(c), "new c")
            c.mkdir()  # the last rename fails at commit time
    assert a.read_text() == "old a" and not b.exists()
    assert _temporaries(tmp_path) == []


# ------------------------------------------------------------------ through the command line

def _broken_html(report):
    raise UserError("html renderer failed")


@pytest.mark.parametrize("html,message", [
    ("r.html", "html renderer failed"),        # render_html raises after -o was prepared
    ("nowhere/r.html", "no such directory"),    # the --html folder is missing
], ids=["html-renderer-fails", "html-folder-missing"])
@pytest.mark.parametrize("existing", [True, False], ids=["old-output", "new-output"])
def test_cli_multi_output_failure_removes_what_it_wrote(tmp_path, monkeypatch, html, message,
                                                       existing):
    import layerscope.renderers.html as html_renderer

    if "renderer" in message:
        monkeypatch.setattr(html_renderer, "render_html", _broken_html)
    out = tmp_path / "report.json"
    if existing:
        out.write_text("old report")
    code, _, err = run_cli("analyze", "mnist-cnn", "-o", str(out), "--html",
                           os.path.join(str(tmp_path), html))
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert "wrote" not in err
    assert (out.read_text() == "old report") if existing else not out.exists()
    assert sorted(os.listdir(tmp_path)) == (["report.json"] if existing else [])


def test_cli_output_to_a_char_device_leaves_it_a_device(tmp_path):
    dev = _char_device(tmp_path / "null")
    code, _, err = run_cli("analyze", "mnist-cnn", "-o", str(dev))
    assert code == 0, err
    assert _is_char_device(dev)
    assert sorted(os.listdir(tmp_path)) == ["null"]


def test_cli_dash_writes_json_to_stdout():
    code, out, err = run_cli("analyze", "mnist-cnn", "--format", "json", "-o", "-")
    assert code == 0, err
    assert json.loads(out)["kind"] and "wrote" not in err


@pytest.mark.integration
def test_cli_png_to_piped_stdout():
    # binary formats go to standard output only when it is not a terminal (here: a pipe)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "layerscope", "analyze", "mnist-cnn",
                           "--format", "png", "-o", "-", "--plot-size", "400x300"],
                          capture_output=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"\x89PNG\r\n") and b"wrote" not in done.stderr


def test_npz_gets_the_usual_mode(tmp_path):
    import numpy as np

    from layerscope.renderers.activations_out import write_npz

    class Capture:
        arrays = {"conv1": np.arange(6.0).reshape(2, 3)}

    path = tmp_path / "acts.npz"
    write_npz(Capture(), str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~_umask()  # was 0600 (mkstemp)
    assert np.load(path)["conv1"].shape == (2, 3)


# ------------------------------------------------------------------ SIGTERM

_SIGTERM_CHILD = textwrap.dedent("""
    import sys, time
    from layerscope.core import io as lio

    def slow(f):
        f.write(b"half of it")
        f.flush()
        print("ready", flush=True)
        time.sleep(60)

    if sys.argv[1] == "file":
        lio.write_file(sys.argv[2], slow)
    elif sys.argv[1] == "outputs":
        with lio.outputs() as tx:
            tx.write(sys.argv[2] + ".first", "first")
            tx.write(sys.argv[2], slow)
    else:
        with lio.temp_dir(near=sys.argv[2]) as d:
            open(d + "/model.onnx.data", "wb").write(b"weights")
            print("ready", flush=True)
            time.sleep(60)
""")


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["file", "outputs", "temp_dir"])
def test_sigterm_during_a_write_removes_temporaries(tmp_path, mode):
    path = tmp_path / "out.bin"
    path.write_text("old")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", _SIGTERM_CHILD, mode, str(path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == b"ready", child.stderr.read()
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 128 + signal.SIGTERM
    assert path.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def test_export_removes_its_temporary_folder_when_interrupted(tmp_path, monkeypatch):
    from layerscope.analysis import onnx_export

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(onnx_export, "_export_legacy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        onnx_export.export_onnx("mnist-cnn", str(tmp_path / "m.onnx"), exporter="legacy")
    assert os.listdir(tmp_path) == []
