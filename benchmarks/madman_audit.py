"""Wall and CPU time of ``madman audit`` (oracle training and testing) on a MADMAN dataset.

Usage::

    .venv/bin/python benchmarks/madman_audit.py DIR [--threads 1] [--epochs 8]

Prints the machine (platform, CPU count, load average before and after), the objects trained and tested, the
wall-clock seconds, this process's CPU seconds and their ratio (the share of a core the run got: 1.0 per
thread on an idle machine), then the audit table. With one thread the CPU seconds are what the run takes on an
idle core, so they are the figure to compare with the 10-minute budget when the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()

    from bindscope.evaluation.audit import audit_madman, format_audit

    def load() -> str:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())

    print(f"machine: {platform.platform()}, python {platform.python_version()}, cpus {os.cpu_count()}, "
          f"load average {load()}")
    wall, cpu = time.perf_counter(), time.process_time()
    result = audit_madman(args.directory, epochs=args.epochs, threads=args.threads)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    counts = result["counts"]
    print(f"objects: {counts['train_objects']} trained, {counts['test_objects']} tested; threads {args.threads}, "
          f"epochs {args.epochs}")
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s, CPU / wall {cpu / wall:.2f}; load average after {load()}")
    print(format_audit(result))


if __name__ == "__main__":
    main()
