"""How the ``layerscope`` process ends once its command has returned.

Normally through ``sys.exit``: the interpreter finalizes. A rank of a distributed ``train`` instead
ends with ``os._exit`` once its outputs are flushed. The reason is torch's: gloo runs each
collective on a worker thread of the process group, and that thread releases the collective's
tensors only after the caller has seen it complete; DDP and FSDP keep the group (and its
threads) alive past ``destroy_process_group``. Releasing a tensor that has a Python object takes
the GIL, and a thread that asks for the GIL while the interpreter finalizes is ended with
``pthread_exit``, which unwinds through a C++ destructor: "terminate called without an active
exception", SIGABRT, after the training had finished (rare: only when the machine is busy enough
to delay that thread past the end of the process). The rank has nothing left to finalize: its
files are written and closed, and the ranks have left the group together (the final barrier in
``training.distributed.leave``)."""
from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

_without_finalizing = False


def without_finalizing() -> None:
    """End this process with ``os._exit`` after its command (a rank of a distributed run)."""
    global _without_finalizing
    _without_finalizing = True


def end(code: int) -> NoReturn:
    if _without_finalizing:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed or a broken pipe: nothing more to write
                pass
        logging.shutdown()
        os._exit(code)
    sys.exit(code)
