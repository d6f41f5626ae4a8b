"""The stress loop (``make test-stress``): the tests that start processes, or the FSDP example of
docs/distributed.md, run again and again beside busy processes, to find what fails only now and
then. A failure here is a defect to fix at its cause, never with a retry or a longer sleep.

    python tests/stress.py                      # the integration tier, 10 rounds, 2 busy
    python tests/stress.py --rounds 3 --busy 1 tests/test_distributed.py
    python tests/stress.py --fsdp 50 --busy 1   # the FSDP example, 50 runs

Each round runs ``pytest -n 2`` (the suite's own way) on the selection: by default the
integration tier (``-m integration``: every test that starts a process, as the check in
tests/conftest.py enforces, and those that train end to end or run the docs' examples). The busy
processes are ``python -c "while True: pass"``, one per ``--busy``. The summary gives each round's
outcome, duration and 1-minute load, and every failing test by name; ``--json FILE`` keeps it,
and each round's JUnit XML (every test's time) beside it as FILE.roundN.xml.
Exit status: 0 when every round passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FSDP_EXAMPLE = ["train", "digits-cnn", "--nproc-per-node", "2", "--strategy", "fsdp",
                "--epochs", "1"]


INTEGRATION_TIER = ["-m", "integration and not slow and not cuda", "tests"]


def load() -> float:
    return os.getloadavg()[0]


@contextmanager
def busy(n: int):
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def pytest_round(selection: list[str], report: Path) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider",
                        "-rf", f"--junitxml={report}", *selection],
                       cwd=ROOT, capture_output=True, text=True)
    failed = re.findall(r"^FAILED (\S+)", p.stdout, re.MULTILINE)
    tail = p.stdout.strip().splitlines()[-1:] if p.stdout.strip() else []
    return {"returncode": p.returncode, "seconds": round(time.perf_counter() - t0, 1),
            "load": round(load(), 2), "failed": failed, "summary": tail[0] if tail else ""}


def fsdp_round(folder: Path) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "layerscope", *FSDP_EXAMPLE, "--out",
                        str(folder / "run"), "--format", "json", "-q"],
                       cwd=folder, capture_output=True, text=True)
    ok = p.returncode == 0 and (folder / "run" / "report.json").is_file()
    problems = [] if ok else [line for line in p.stderr.splitlines()
                              if "error" in line or "terminate" in line][:3]
    return {"returncode": p.returncode, "seconds": round(time.perf_counter() - t0, 1),
            "load": round(load(), 2), "failed": problems,
            "summary": "report written" if ok else "failed"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="rounds of the tests (default 10)")
    ap.add_argument("--busy", type=int, default=2, help="busy processes beside them (default 2)")
    ap.add_argument("--fsdp", type=int, metavar="N",
                    help="run the FSDP example N times instead of the tests")
    ap.add_argument("--json", type=Path, help="keep the summary in this file")
    ap.add_argument("selection", nargs="*", help="test files or ids (default: the integration "
                                                 "tier)")
    args = ap.parse_args(argv)
    selection = args.selection or INTEGRATION_TIER
    rounds = []
    with tempfile.TemporaryDirectory(prefix="layerscope-stress-") as tmp, busy(args.busy):
        for i in range(args.fsdp or args.rounds):
            folder = Path(tmp) / f"round{i + 1}"
            folder.mkdir()
            junit = (args.json.with_suffix(f".round{i + 1}.xml") if args.json
                     else folder / "junit.xml")  # each test's time, kept beside --json
            r = fsdp_round(folder) if args.fsdp else pytest_round(selection, junit)
            rounds.append(r)
            status = "passed" if r["returncode"] == 0 else f"FAILED ({r['returncode']})"
            print(f"round {i + 1}: {status} in {r['seconds']} s at load {r['load']}"
                  f"{': ' + r['summary'] if r['summary'] else ''}", flush=True)
            for name in r["failed"]:
                print(f"    {name}", flush=True)
    failures = [r for r in rounds if r["returncode"] != 0]
    loads = [r["load"] for r in rounds]
    what = ("the FSDP example" if args.fsdp else "the integration tier"
            if selection == INTEGRATION_TIER else " ".join(selection))
    print(f"{len(rounds) - len(failures)} of {len(rounds)} rounds passed ({what}, "
          f"{args.busy} busy process(es), load {min(loads):.1f}-{max(loads):.1f} on "
          f"{os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(json.dumps({"what": what, "busy": args.busy, "cpus": os.cpu_count(),
                                         "selection": selection, "rounds": rounds}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
