"""``AgentRunner``'s batches: one task per input, run concurrently (``nbagent.batch``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from nbagent.engine.step_engine import StepEngine

if TYPE_CHECKING:
    from nbagent.batch import BatchRun
    from nbagent.schema import AgentChatResponse

__all__ = ["RunnerBatch"]


class RunnerBatch(StepEngine):
    """``run_batch`` / ``arun_batch``: the parameters are ``nbagent.batch.run_batch``'s."""

    def run_batch(
        self,
        inputs: Iterable[str],
        *,
        max_concurrency: int = 16,
        store: Any = None,
        backend: Literal["asyncio", "ray"] = "asyncio",
        factory: Callable[[], Any] | None = None,
        progress: bool | str = "auto",
        background: bool = False,
        name: str = "batch",
        timeout_s: float | None = None,
        ray_options: dict[str, Any] | None = None,
        check: Callable[[str, AgentChatResponse], Any] | None = None,
    ) -> BatchRun:
        """One task per input, ``max_concurrency`` at a time, each reading the conversation
        and adding nothing to it; a ``BatchRun``. ``store`` saves every task as it ends (and
        resumes a batch that stopped), ``check(input, answer)`` grades each answer,
        ``progress`` is "auto", "grid", "tqdm" or False, ``background=True`` returns at once.
        See ``nbagent.batch.run_batch``."""
        from nbagent.batch import run_batch

        return run_batch(
            self, inputs, max_concurrency=max_concurrency, store=store, backend=backend, factory=factory,
            progress=progress, background=background, name=name, timeout_s=timeout_s,
            ray_options=ray_options, check=check,
        )

    async def arun_batch(
        self,
        inputs: Iterable[str],
        *,
        max_concurrency: int = 16,
        store: Any = None,
        backend: Literal["asyncio", "ray"] = "asyncio",
        factory: Callable[[], Any] | None = None,
        progress: bool | str = False,
        name: str = "batch",
        timeout_s: float | None = None,
        ray_options: dict[str, Any] | None = None,
        check: Callable[[str, AgentChatResponse], Any] | None = None,
    ) -> BatchRun:
        """``run_batch`` on the running event loop (no progress view unless asked).
        See ``nbagent.batch.arun_batch``."""
        from nbagent.batch import arun_batch

        return await arun_batch(
            self, inputs, max_concurrency=max_concurrency, store=store, backend=backend, factory=factory,
            progress=progress, name=name, timeout_s=timeout_s, ray_options=ray_options, check=check,
        )
