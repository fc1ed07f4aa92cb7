"""Run ``madman train ARGS...`` in this process, slowed down inside every optimiser step, for the Ctrl-C tests
(tests/test_training_interrupt.py).

Usage: ``python tests/slow_train.py DELAY ARGS...``. Each step sleeps DELAY seconds after the weights were
updated and before the step is counted (in the grad scaler's update), the window in which an interrupt that
lands mid-step would leave the weights one optimiser step ahead of the saved step. After each finished step one
line ``step N indices I,J,...`` (the batch's sample indices) goes to stdout.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> None:
    import torch

    from bindscope.cli.main import madman
    from bindscope.training.train import Trainer

    delay = float(argv[0])
    update, train_step = torch.amp.GradScaler.update, Trainer.train_step

    def slow_update(self, *args, **kwargs):
        time.sleep(delay)
        return update(self, *args, **kwargs)

    def logged_step(self, batch):
        loss = train_step(self, batch)
        print(f"step {self.step} indices {','.join(map(str, batch['indices'].tolist()))}", flush=True)
        return loss

    torch.amp.GradScaler.update = slow_update
    Trainer.train_step = logged_step
    madman.main(argv[1:], prog_name="madman")


if __name__ == "__main__":
    main(sys.argv[1:])
