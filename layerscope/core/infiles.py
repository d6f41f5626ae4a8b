"""Files a user names as inputs (models, saved results, configs, images, external data) are
read only when they are regular files or folders: a character device such as ``/dev/zero``
would be read until memory runs out, a FIFO blocks its reader until someone writes to it."""
from __future__ import annotations

import os
import stat

from layerscope.core.errors import UserError

_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder ("a character device",
    "a FIFO (named pipe)", ...); None for those, and for a path that cannot be looked at (the
    reader then says why). Looks at the file without opening it; follows symbolic links."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((name for test, name in _KINDS if test(mode)), None)


def check_input_file(path: str | os.PathLike[str], what: str) -> None:
    """Refuse, before anything opens it, an input that is not a regular file or a folder:
    "PATH is a character device, not WHAT" (``what``: "a model file", "a saved result (.json)")."""
    kind = special_kind(path)
    if kind is not None:
        raise UserError(f"{os.fspath(path)} is {kind}, not {what}")
