"""The settings of ``layerscope diff`` (core.settings), declared apart from the diff itself so
that the command line reads them without importing the analysis (start-up stays light)."""
from __future__ import annotations

import dataclasses

from layerscope.core.errors import UserError
from layerscope.core.settings import REQUIRED, Settings, option


@dataclasses.dataclass(kw_only=True, eq=False)
class DiffSettings(Settings):
    """The saved results (the base, one or more, then the new one) and the gates on them."""

    files: list[str] = option(REQUIRED, "saved results: the base (one or more), then the new "
                                        "one", positional=True, nargs="+",
                              metavar="FILE.json")
    fail_if: list[str] = option(
        [], "exit 1 when a change beyond the noise passes this threshold, e.g. 'step>+5%%', "
            "'layer:*.attn>+10%%', 'phase:backward>+10%%', 'end_to_end<-5%%' (repeatable); "
            "the failed lines go to stderr", append=True, metavar="EXPR")

    def check(self) -> None:
        from layerscope.analysis.diff.gate import parse_check

        if len(self.files) < 2:
            raise UserError("diff needs at least two files: the base (one or more), then the "
                            "new one", arguments="files")
        for expression in self.fail_if:  # a malformed one: refused before any reading
            parse_check(expression)
