"""Run ``madman train ARGS...`` in this process, slowed down inside every optimiser step (and, on request, inside
every evaluation), for the interruption tests (tests/test_training_interrupt.py, tests/test_training_resume.py,
tests/test_training_ranks.py).

Usage: ``python tests/slow_train.py DELAY [--eval-delay SECONDS] ARGS...``. Each step sleeps DELAY seconds after the
weights were updated and before the step is counted (in the grad scaler's update), the window in which an
interrupt that lands mid-step would leave the weights one optimiser step ahead of the saved step. After each
finished step one line ``step N indices I,J,...`` (the batch's sample indices) goes to stdout; with
``--eval-delay``, each evaluation prints ``evaluating step N`` and then sleeps that long before it scores.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> None:
    import torch

    from bindscope.cli.main import madman
    from bindscope.training import train as train_module
    from bindscope.training.train import Trainer

    delay, argv = float(argv[0]), argv[1:]
    eval_delay = 0.0
    if argv[:1] == ["--eval-delay"]:
        eval_delay, argv = float(argv[1]), argv[2:]
    update, train_step, evaluate = torch.amp.GradScaler.update, Trainer.train_step, train_module.evaluate_run

    def slow_update(self, *args, **kwargs):
        time.sleep(delay)
        return update(self, *args, **kwargs)

    def logged_step(self, batch):
        loss = train_step(self, batch)
        print(f"step {self.step} indices {','.join(map(str, batch['indices'].tolist()))}", flush=True)
        return loss

    def slow_evaluate(evaluation, adapter, rows=None):
        print(f"evaluating step {current[0].step}", flush=True)
        time.sleep(eval_delay)
        return evaluate(evaluation, adapter, rows)

    current = []
    init = Trainer.__init__

    def remember(self, *args, **kwargs):
        current[:] = [self]
        init(self, *args, **kwargs)

    torch.amp.GradScaler.update = slow_update
    Trainer.train_step = logged_step
    if eval_delay:
        Trainer.__init__ = remember
        train_module.evaluate_run = slow_evaluate
    madman.main(argv, prog_name="madman")


if __name__ == "__main__":
    main(sys.argv[1:])
