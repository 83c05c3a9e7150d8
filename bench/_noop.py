"""A worker that does nothing, so a benchmark measures only the runner."""

from __future__ import annotations

from typing import Any

from nbagent import AgentChatResponse, BaseAgentWorker, Task, TaskStep, TaskStepOutput


class NoopWorker(BaseAgentWorker):
    """Runs ``steps`` steps; each returns a tiny output and queues the next.

    Its only state is a step counter in ``task.extra_state``, so the runner snapshots (and
    could undo) something real on every step.
    """

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        task.extra_state["n"] = 0
        return TaskStep(task_id=task.task_id, input=task.input)

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        n = task.extra_state["n"] = task.extra_state["n"] + 1
        last = n >= self.steps
        nxt = [] if last else [step.get_next_step()]
        out = AgentChatResponse(response="done") if last else "ok"
        return TaskStepOutput(output=out, task_step=step, next_steps=nxt, is_last=last)
