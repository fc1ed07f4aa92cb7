"""Evaluation tasks as registered objects (:mod:`bindscope.evaluation.tasks.registry`): one module per task of
bindscope's (TOR, Claim 1, IOR, I2TOR, matching, binding, TOC, IOC, retrieval, first-mention, large-object,
attention, the benchmarks), each defining its :class:`Task` objects in ``TASKS``; plug-ins add theirs with
:func:`register_task` or the ``bindscope.tasks`` entry-point group. The result schema of each kind is composed
from the tasks' block schemas (:mod:`bindscope.evaluation.tasks.schema`)."""

from bindscope.evaluation.tasks.registry import Task, get_task, register_task, tasks, unregister_task

__all__ = ["Task", "get_task", "register_task", "tasks", "unregister_task"]
