"""Build a toy dataset slowly in its own process, for the kill -9 and concurrency tests (tests/crash_runs.py).

    python tests/slow_build.py OUT [--seed S] [--jobs J] [--delay SECONDS] [--overwrite] [--progress]
                               [--die-at STEP]

The generator is :class:`toy_generator.SquaresGenerator` (12 shards of 3 samples) sleeping ``--delay`` seconds
per shard. ``--die-at`` makes the process kill itself with SIGKILL at an exact moment: right after the card
(``card``) or the manifest (``manifest``) is written, half-way through the tidy-up (``tidy``), or with the
temporary file of an atomic write complete but not yet renamed (the ``*-tmp`` moments of :data:`BEFORE_RENAME`:
the run state at the start, the first shard, and the marker, card and manifest of the finish). Bad input prints
one ``Error:`` line and exits 2, as the CLI does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from toy_generator import SquaresGenerator  # noqa: E402

# --die-at moment -> (final file name, how many renames onto that name to let through before the kill)
BEFORE_RENAME = {"state-tmp": (".bindscope-run.json", 0), "shard-tmp": ("train-00000.h5", 0),
                 "marker-tmp": (".bindscope.json", 1), "card-tmp": ("README.md", 0),
                 "manifest-tmp": ("manifest.json", 0)}
MOMENTS = ["state-tmp", "shard-tmp", "marker-tmp", "card-tmp", "card", "manifest-tmp", "manifest", "tidy"]


def die_before_rename(name: str, skip: int) -> None:
    """SIGKILL this process when it is about to rename a finished temporary file onto ``name`` for the
    ``skip + 1``-th time (every atomic write ends with ``os.replace``)."""
    original, seen = os.replace, [0]

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == name:
            if seen[0] == skip:
                os.kill(os.getpid(), signal.SIGKILL)
            seen[0] += 1
        return original(src, dst, *args, **kwargs)

    os.replace = replace


@dataclass
class SlowSquares(SquaresGenerator):
    delay: float = 0.0

    @property
    def config(self) -> dict:  # the delay is not part of the config: it changes timing only
        return {"splits": self.splits, "shard_size": self.shard_size}

    def make_samples(self, split, start, count):
        time.sleep(self.delay)
        return super().make_samples(split, start, count)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--progress", action="store_true", help="the progress bar (with --jobs > 1 a "
                        "multiprocessing Manager process carries the workers' counts)")
    parser.add_argument("--die-at", choices=MOMENTS, default=None)
    args = parser.parse_args()
    from bindscope.build import builder as build
    from bindscope.errors import BadInput

    if args.die_at in BEFORE_RENAME:
        die_before_rename(*BEFORE_RENAME[args.die_at])
    elif args.die_at:
        original = build.write_text_atomic

        def write_then_die(path, text):
            original(path, text)
            name = Path(path).name
            if (args.die_at, name) in (("card", "README.md"), ("manifest", "manifest.json")):
                os.kill(os.getpid(), signal.SIGKILL)

        build.write_text_atomic = write_then_die
        if args.die_at == "tidy":
            original_tidy = build.tidy_finished

            def tidy_then_die(out):
                (out / build.RUN_STATE).unlink(missing_ok=True)  # half of the tidy-up, then the kill
                os.kill(os.getpid(), signal.SIGKILL)
                original_tidy(out)

            build.tidy_finished = tidy_then_die
    generator = SlowSquares(splits={"train": 24, "test": 12}, shard_size=3, seed=args.seed, delay=args.delay)
    try:
        build.build_dataset(generator, args.out, jobs=args.jobs, overwrite=args.overwrite,
                            progress=args.progress)
    except BadInput as exc:
        print(f"Error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    print("done")


if __name__ == "__main__":
    main()
