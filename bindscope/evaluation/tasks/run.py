"""What every task's ``compute(run, options)`` reads and writes: the encoder, the chosen tasks and their options,
the seed, the per-sample rows and the metrics. The runner of each kind fills a subclass with what it read
(:class:`bindscope.evaluation.scenes.SceneRun`, :class:`bindscope.evaluation.splits.SplitRun`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from bindscope.evaluation.results import apply_text_transform
from bindscope.evaluation.tasks.registry import Task, shared_option


@dataclass
class TaskRun:
    """The part of a run every task sees.

    Attributes:
        adapter / embedder / text_transform: the encoder, its :class:`~bindscope.encoders.embedding_cache.Embedder`
            and the map applied to text embeddings (:meth:`embed` applies it).
        chosen / options / names: the tasks that run (registration order), their checked options by task name,
            their names as given (the result's ``settings.tasks``).
        seed: seed of samplings and bootstraps. rows: a list the tasks append per-sample rows to, or None.
        progress: tqdm bars. metrics: the result's ``metrics``, filled by the tasks.
    """

    adapter: object
    embedder: object
    text_transform: Callable | None
    chosen: list[Task]
    options: dict
    names: list[str]
    seed: int = 0
    rows: list | None = None
    progress: bool = True
    metrics: dict = field(default_factory=dict)

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), D) embeddings of ``texts`` with the text transform applied."""
        return apply_text_transform(self.embedder.texts(texts), self.text_transform)

    def compute_tasks(self) -> None:
        """Each chosen task's ``compute`` on this run with its options, in registration order."""
        for task in self.chosen:
            task.compute(self, self.options.get(task.name))

    def option(self, name: str, default=None):
        """The value of option field ``name`` in the chosen tasks that have it, else ``default``."""
        return shared_option(self.chosen, self.options, name, default)
