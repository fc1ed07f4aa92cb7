"""The full attack matrix: every bad or crafted input case, then kill -9 and concurrency runs.

Prints how many cases were tried and handled, in all and by class (the case id's prefix: ``model:`` no code
from a model, ``out:`` and ``lock:`` output folders, ``shard:``, ``closed:`` crafted datasets, ``weights:`` weight
files, ...) (exit 2 with one ``Error:`` line naming the value or file, or for
``bindscope verify`` exit 1 listing the problem with its file; no traceback; nothing written or deleted), the
failures one per line, then the kill -9 and two-writer figures (see tests/crash_runs.py), the machine and the
wall time.

    PYTHONPATH=$PWD python benchmarks/attack_matrix.py [--only SUBSTRING] [--kills N]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("BINDSCOPE_CACHE", tempfile.mkdtemp(prefix="bindscope-attack-cache-"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only cases whose id contains one of these (comma-separated)")
    parser.add_argument("--kills", type=int, default=12,
                        help="timed kill -9 runs (moments spread over the run), besides the exact moments")
    args = parser.parse_args()
    from attack_matrix import build_fixtures, cases, run_case
    from crash_runs import kill_and_repeat, two_writers

    start = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bindscope-attack-"))
    fixtures = build_fixtures(root / "fixtures")
    selected = [c for c in cases() if any(part in c.id for part in args.only.split(","))]
    failures = []
    for number, case in enumerate(selected):
        outcome = run_case(case, fixtures, root / f"case-{number:04d}")
        if not outcome.handled:
            failures.append(outcome)
            print(f"  NOT HANDLED {case.id}: {outcome.reason}", flush=True)
    print(f"attack matrix: {len(selected)} cases tried, {len(selected) - len(failures)} handled "
          f"({100 * (len(selected) - len(failures)) / max(1, len(selected)):.1f} %)")
    failed = Counter(outcome.case.id.split(":")[0] for outcome in failures)
    for group, tried in sorted(Counter(case.id.split(":")[0] for case in selected).items()):
        print(f"  {group + ':':<10} {tried:4d} tried, {tried - failed[group]:4d} handled")
    for outcome in failures:
        print(f"  {outcome.case.id}: {outcome.output.strip()[-300:]!r}")
    if args.kills and not args.only:
        identical, runs, moments = kill_and_repeat(root / "kills", args.kills)
        print(f"kill -9 then the same command: {identical} of {runs} byte-identical to an uninterrupted run "
              f"(kill moments {', '.join(moments)})")
        refused, tries = two_writers(root / "writers")
        print(f"two writers on one folder: the second refused {refused} of {tries} times")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
