"""A toy generator that stalls inside one shard on its first attempt, so a test can kill the worker making it.

Its config and samples are those of :class:`toy_generator.SquaresGenerator` (same run id, same bytes); the
extra fields only change timing. On the first attempt at shard ``stall_start`` of split ``stall_split`` it
writes ``<marker_dir>/attempt-1.pid`` (its process id), leaves a half-written temporary shard file in
``<out>/shards`` (what a writer killed mid-write leaves) and sleeps; a later attempt records
``attempt-2.pid`` and makes the shard normally.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from toy_generator import SquaresGenerator


@dataclass
class StallingSquares(SquaresGenerator):
    marker_dir: str = ""
    out: str = ""
    stall_split: str = "train"
    stall_start: int = 0
    stall_seconds: float = 120.0

    def make_samples(self, split, start, count):
        if split == self.stall_split and start == self.stall_start:
            marker = Path(self.marker_dir)
            attempt = len(list(marker.glob("attempt-*.pid"))) + 1
            if attempt == 1:  # the half-written file first, so it exists once the marker is visible
                number = start // self.shard_size
                partial = Path(self.out) / "shards" / f".{split}-{number:05d}.h5.{os.getpid()}.tmp"
                partial.write_bytes(b"\x89HDF\r\n\x1a\n half-written")
            (marker / f".attempt-{attempt}.tmp").write_text(str(os.getpid()))
            os.replace(marker / f".attempt-{attempt}.tmp", marker / f"attempt-{attempt}.pid")
            if attempt == 1:
                time.sleep(self.stall_seconds)
        return super().make_samples(split, start, count)
