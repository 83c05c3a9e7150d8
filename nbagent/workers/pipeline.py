"""``QueryPipelineAgentWorker``: present so code ported from the reference imports, but refused.

The reference itself deprecated it ("Use FnAgentWorker instead to build a stateful agent"), and it
needs LlamaIndex's QueryPipeline, which nbagent does not have. Constructing one raises at once
with the replacement, instead of accepting a pipeline and running something else.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["QueryPipelineAgentWorker"]


class QueryPipelineAgentWorker:
    """Deprecated on the reference page; build the same stateful agent with ``FnAgentWorker``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    @classmethod
    def from_defaults(cls, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse()


def _refuse() -> NoReturn:
    raise NotImplementedError(
        "QueryPipelineAgentWorker is deprecated on the reference page and needs LlamaIndex's "
        "QueryPipeline, which nbagent does not have. Write the pipeline's steps as one function "
        "instead: FnAgentWorker(fn=lambda state: (state, is_done)), with the answer in "
        "state['__output__'] (see notebook 04)."
    )
