"""Reports as JSON (one object; keys from Report.to_dict)."""
from __future__ import annotations

import json


def to_json(report, indent: int | None = 2) -> str:
    return json.dumps(report.to_dict(), indent=indent) + "\n"
