"""The deprecated agent components (``StatefulFnComponent`` replaces them): the agent worker
fixes their ``task`` and ``state`` inputs each step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbagent.query_pipeline.components import (
    CustomQueryComponent,
    InputKeys,
    OutputKeys,
    QueryComponent,
    _fn_name,
    _names,
    get_parameters,
)

__all__ = ["BaseAgentComponent", "AgentInputComponent", "AgentFnComponent", "CustomAgentComponent"]


class BaseAgentComponent(QueryComponent):
    """Deprecated agent components: the worker fixes their ``task`` and ``state`` each step."""


def _check_agent_inputs(component: QueryComponent, input: dict[str, Any]) -> None:
    from nbagent.schema import Task

    if not isinstance(input.get("task"), Task):
        raise ValueError(f"{component!r}: input 'task' must be a Task, got {type(input.get('task')).__name__}")
    if not isinstance(input.get("state"), dict):
        raise ValueError(f"{component!r}: input 'state' must be a dict, got {type(input.get('state')).__name__}")


class AgentInputComponent(QueryComponent):
    """Deprecated (use ``StatefulFnComponent``): the first module of an agent pipeline.

    ``fn(task, state, ...)`` returns a dict, which becomes this module's outputs.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        async_fn: Callable[..., Any] | None = None,
        req_params: set[str] | None = None,
        opt_params: set[str] | None = None,
    ) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"{type(self).__name__} needs a function as fn, got {type(fn).__name__}")
        self.fn = fn
        self.async_fn = async_fn
        required, optional = get_parameters(fn)
        self._req_params = set(required if req_params is None else req_params)
        self._opt_params = set(optional if opt_params is None else opt_params)

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys({"task", "state", *self._req_params}, self._opt_params)

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys()

    def validate_component_inputs(self, input: dict[str, Any]) -> dict[str, Any]:
        _check_agent_inputs(self, input)
        return super().validate_component_inputs(input)

    def validate_component_outputs(self, output: dict[str, Any]) -> dict[str, Any]:
        return output

    def _checked(self, output: Any) -> dict[str, Any]:
        if not isinstance(output, dict):
            raise ValueError(f"{self!r}: fn must return a dict (its outputs), got {type(output).__name__}")
        return output

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        return self._checked(self.fn(**kwargs))

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        if self.async_fn is None:
            return self._run_component(**kwargs)
        return self._checked(await self.async_fn(**kwargs))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fn={_fn_name(self.fn)})"


class AgentFnComponent(BaseAgentComponent):
    """Deprecated (use ``StatefulFnComponent``): ``fn(task, state, ...)`` -> ``output``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        async_fn: Callable[..., Any] | None = None,
        req_params: set[str] | None = None,
        opt_params: set[str] | None = None,
    ) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"{type(self).__name__} needs a function as fn, got {type(fn).__name__}")
        required, optional = get_parameters(fn)
        if not {"task", "state"} <= required:
            raise ValueError(
                f"AgentFnComponent needs a function with required parameters 'task' and 'state'; "
                f"{_fn_name(fn)} takes {_names(required | optional)}"
            )
        self.fn = fn
        self.async_fn = async_fn
        self._req_params = set(required - {"task", "state"} if req_params is None else req_params)
        self._opt_params = set(optional - {"task", "state"} if opt_params is None else opt_params)

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys({"task", "state", *self._req_params}, self._opt_params)

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys({"output"})

    def validate_component_inputs(self, input: dict[str, Any]) -> dict[str, Any]:
        _check_agent_inputs(self, input)
        return super().validate_component_inputs(input)

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        return {"output": self.fn(**kwargs)}

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        if self.async_fn is None:
            return self._run_component(**kwargs)
        return {"output": await self.async_fn(**kwargs)}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fn={_fn_name(self.fn)})"


class CustomAgentComponent(BaseAgentComponent, CustomQueryComponent):
    """Deprecated (use ``StatefulFnComponent``): a custom component that also takes ``task``
    and ``state`` (fixed by the worker each step)."""

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys({*self._input_keys, "task", "state"}, self._optional_input_keys)
