"""A small query pipeline: enough of LlamaIndex's ``QueryPipeline`` to port its agent patterns.

LlamaIndex deprecated ``QueryPipeline`` (and ``QueryPipelineAgentWorker`` built on it); code that
used them moves to nbagent by changing imports: ``from nbagent.query_pipeline import
QueryPipeline, FnComponent, StatefulFnComponent, InputComponent, Link``. New code should write
the agent as one function with ``FnAgentWorker`` instead.

A pipeline is a DAG of named modules (components). A module runs once its parents have run and
it has all its required inputs; a link can pick one output (``src_key``), feed one input
(``dest_key``), transform the value (``input_fn``) or be taken only when ``condition_fn(value)``
is true. A module none of whose links was taken is skipped. ``run`` gives the root module its
inputs and returns the output of the module that ended the run.

Call conventions follow llama-index-core 0.12.52, including one that surprises:
``update_state(d)`` merges ``d`` into ``pipeline.state`` but hands the stateful components ``d``
itself (this is what the agent worker relies on: each step's components see exactly
``{"task": ..., "step_state": ...}``, so what must outlive the step lives in ``step_state``,
where the runner's undo sees it). Bad graphs fail when built: a link to an unknown module, a
link that closes a cycle, a duplicate key.
"""

from nbagent.query_pipeline.agent import (
    AgentFnComponent,
    AgentInputComponent,
    BaseAgentComponent,
    CustomAgentComponent,
)
from nbagent.query_pipeline.components import (
    BaseStatefulComponent,
    ChainableMixin,
    CustomQueryComponent,
    FnComponent,
    FunctionComponent,
    InputComponent,
    InputKeys,
    OutputKeys,
    QueryComponent,
    StatefulFnComponent,
    get_parameters,
)
from nbagent.query_pipeline.model import LLMChatComponent, PromptComponent, ToolRunnerComponent
from nbagent.query_pipeline.pipeline import ComponentIntermediates, Link, QueryPipeline

__all__ = [
    "InputKeys",
    "OutputKeys",
    "QueryComponent",
    "CustomQueryComponent",
    "FnComponent",
    "FunctionComponent",
    "BaseStatefulComponent",
    "StatefulFnComponent",
    "InputComponent",
    "LLMChatComponent",
    "PromptComponent",
    "ToolRunnerComponent",
    "BaseAgentComponent",
    "AgentInputComponent",
    "AgentFnComponent",
    "CustomAgentComponent",
    "ChainableMixin",
    "Link",
    "ComponentIntermediates",
    "QueryPipeline",
    "get_parameters",
]
