"""Run ``madman train ARGS...`` in this process (under torchrun or alone), with the last process asking for a
stop after step STOP as a Ctrl-C or SIGTERM would (the signal handler's flag), for tests/test_distributed.py.

Usage: ``python tests/ddp_stop.py STOP ARGS...`` (STOP 0: no stop).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from bindscope.cli.main import madman
    from bindscope.training.train import Trainer

    stop, train_step = int(argv[0]), Trainer.train_step

    def step_then_stop(self, batch):
        loss = train_step(self, batch)
        if self.step == stop and self.group.rank == self.group.world_size - 1:
            self._interrupted = True
        return loss

    Trainer.train_step = step_then_stop
    madman.main(argv[1:], prog_name="madman")


if __name__ == "__main__":
    main(sys.argv[1:])
