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

from __future__ import annotations

import asyncio
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbagent._compat import warn_callback_manager
from nbagent.messages import ChatMessage, MessageRole

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


def _names(keys: Iterable[str]) -> list[str]:
    return sorted(keys)


def get_parameters(fn: Callable[..., Any]) -> tuple[set[str], set[str]]:
    """The required and optional parameter names of ``fn`` (``*args`` / ``**kwargs`` left out)."""
    required: set[str] = set()
    optional: set[str] = set()
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        (required if param.default is param.empty else optional).add(name)
    return required, optional


def _takes_var_kwargs(fn: Callable[..., Any]) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())


class InputKeys:
    """The inputs a component takes: required and optional names."""

    def __init__(self, required_keys: set[str] | None = None, optional_keys: set[str] | None = None):
        self.required_keys = set(required_keys or ())
        self.optional_keys = set(optional_keys or ())

    @classmethod
    def from_keys(cls, required_keys: set[str], optional_keys: set[str] | None = None) -> InputKeys:
        return cls(required_keys, optional_keys)

    def all(self) -> set[str]:
        return self.required_keys | self.optional_keys

    def __len__(self) -> int:
        return len(self.required_keys) + len(self.optional_keys)

    def __repr__(self) -> str:
        return f"InputKeys(required={_names(self.required_keys)}, optional={_names(self.optional_keys)})"


class OutputKeys:
    """The outputs a component returns (the keys of its output dict)."""

    def __init__(self, required_keys: set[str] | None = None):
        self.required_keys = set(required_keys or ())

    @classmethod
    def from_keys(cls, required_keys: set[str]) -> OutputKeys:
        return cls(required_keys)

    def __repr__(self) -> str:
        return f"OutputKeys({_names(self.required_keys)})"


class QueryComponent(ABC):
    """One module of a pipeline: takes keyword inputs, returns a dict of outputs.

    ``partial(**kwargs)`` fixes some inputs ahead of time; those are no longer needed from links.
    """

    def __init__(self) -> None:
        self.partial_dict: dict[str, Any] = {}

    def partial(self, **kwargs: Any) -> None:
        """Fix some inputs ahead of time (they are no longer required from links)."""
        self.partial_dict.update(kwargs)

    def set_callback_manager(self, callback_manager: Any) -> None:
        """Accepted for compatibility; the pipeline says once that it has no effect."""

    @property
    @abstractmethod
    def input_keys(self) -> InputKeys:
        """The inputs this component takes."""

    @property
    @abstractmethod
    def output_keys(self) -> OutputKeys:
        """The outputs this component returns."""

    @property
    def free_req_input_keys(self) -> set[str]:
        """Required inputs not fixed by ``partial``: these must come from links or ``run``."""
        return self.input_keys.required_keys - set(self.partial_dict)

    @property
    def sub_query_components(self) -> list[QueryComponent]:
        """Components inside this one (a nested pipeline's modules)."""
        return []

    def _accepts_any_input(self) -> bool:
        return False

    def validate_component_inputs(self, input: dict[str, Any]) -> dict[str, Any]:
        """Check the input names against ``input_keys``; the error names both."""
        keys = self.input_keys
        missing = keys.required_keys - set(input)
        extra = set() if self._accepts_any_input() else set(input) - keys.all()
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing required input(s) {_names(missing)}")
            if extra:
                parts.append(f"unexpected input(s) {_names(extra)}")
            raise ValueError(
                f"{self!r}: {' and '.join(parts)}; it takes required {_names(keys.required_keys)}"
                f", optional {_names(keys.optional_keys)}; got {_names(input)}"
            )
        return input

    def validate_component_outputs(self, output: dict[str, Any]) -> dict[str, Any]:
        """Check the output dict against ``output_keys``."""
        if not isinstance(output, dict):
            raise TypeError(f"{self!r} must return a dict of outputs, got {type(output).__name__}")
        want = self.output_keys.required_keys
        if set(output) != want:
            raise ValueError(f"{self!r} returned outputs {_names(output)}, expected exactly {_names(want)}")
        return output

    def run_component(self, **kwargs: Any) -> dict[str, Any]:
        """Run with the given inputs (plus the partial ones); returns the output dict."""
        kwargs.update(self.partial_dict)
        kwargs = self.validate_component_inputs(kwargs)
        return self.validate_component_outputs(self._run_component(**kwargs))

    async def arun_component(self, **kwargs: Any) -> dict[str, Any]:
        """Async ``run_component``."""
        kwargs.update(self.partial_dict)
        kwargs = self.validate_component_inputs(kwargs)
        return self.validate_component_outputs(await self._arun_component(**kwargs))

    @abstractmethod
    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        """Do the work."""

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        """Async work; by default the sync one."""
        return self._run_component(**kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CustomQueryComponent(QueryComponent):
    """Subclass and give ``_input_keys``, ``_output_keys`` and ``_run_component``."""

    @property
    def _input_keys(self) -> set[str]:
        raise NotImplementedError(f"{type(self).__name__} must define the property _input_keys")

    @property
    def _optional_input_keys(self) -> set[str]:
        return set()

    @property
    def _output_keys(self) -> set[str]:
        raise NotImplementedError(f"{type(self).__name__} must define the property _output_keys")

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys(self._input_keys, self._optional_input_keys)

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys(self._output_keys)


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


class FnComponent(QueryComponent):
    """A function as a component: its parameters are the inputs, its result is ``output_key``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        async_fn: Callable[..., Any] | None = None,
        req_params: set[str] | None = None,
        opt_params: set[str] | None = None,
        output_key: str = "output",
    ) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"{type(self).__name__} needs a function as fn, got {type(fn).__name__}")
        if async_fn is not None and not callable(async_fn):
            raise TypeError(f"{type(self).__name__} async_fn must be callable, got {type(async_fn).__name__}")
        self.fn = fn
        self.async_fn = async_fn
        self.output_key = output_key
        required, optional = get_parameters(fn)
        self._req_params = set(required if req_params is None else req_params)
        self._opt_params = set(optional if opt_params is None else opt_params)
        self._var_kwargs = _takes_var_kwargs(fn)

    def _accepts_any_input(self) -> bool:
        return self._var_kwargs

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys(self._req_params, self._opt_params)

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys({self.output_key})

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        result = self.fn(**kwargs)
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise TypeError(
                f"{self!r}: fn returned an awaitable; run the pipeline with arun(), or pass "
                "the coroutine function as async_fn=..."
            )
        return {self.output_key: result}

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        if self.async_fn is None:
            result = self.fn(**kwargs)
        else:
            result = self.async_fn(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return {self.output_key: result}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fn={_fn_name(self.fn)})"


FunctionComponent = FnComponent


class BaseStatefulComponent(QueryComponent):
    """A component that sees the pipeline's ``state`` dict (set by the pipeline)."""

    state: dict[str, Any]

    def reset_state(self) -> None:
        self.state = {}


class StatefulFnComponent(BaseStatefulComponent, FnComponent):
    """``FnComponent`` whose function takes ``state`` (the pipeline's state) as well."""

    def __init__(
        self,
        fn: Callable[..., Any],
        req_params: set[str] | None = None,
        opt_params: set[str] | None = None,
        state: dict[str, Any] | None = None,
        async_fn: Callable[..., Any] | None = None,
        output_key: str = "output",
    ) -> None:
        if not callable(fn):
            raise TypeError(f"StatefulFnComponent needs a function as fn, got {type(fn).__name__}")
        required, optional = get_parameters(fn)
        if "state" not in required:
            raise ValueError(
                f"StatefulFnComponent needs a function with a required parameter 'state' (the "
                f"pipeline's state); {_fn_name(fn)} takes {_names(required | optional)}"
            )
        FnComponent.__init__(
            self,
            fn,
            async_fn=async_fn,
            req_params=required - {"state"} if req_params is None else req_params,
            opt_params=optional - {"state"} if opt_params is None else opt_params,
            output_key=output_key,
        )
        self.state = {} if state is None else state

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        return super()._run_component(state=self.state, **kwargs)

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        return await super()._arun_component(state=self.state, **kwargs)


class InputComponent(QueryComponent):
    """Passes its keyword inputs through as its outputs (a pipeline's entry point)."""

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys()

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys()

    def validate_component_inputs(self, input: dict[str, Any]) -> dict[str, Any]:
        return input

    def validate_component_outputs(self, output: dict[str, Any]) -> dict[str, Any]:
        return output

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs


class LLMChatComponent(QueryComponent):
    """A chat model as a module (what a model in ``chain=[...]`` becomes): ``messages`` in
    (a list of ChatMessage, or a string sent as one user message), the ``ChatResponse`` out."""

    def __init__(self, llm: Any) -> None:
        super().__init__()
        self.llm = llm

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys({"messages"})

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys({"output"})

    def _messages(self, messages: Any) -> list[ChatMessage]:
        if isinstance(messages, str):
            return [ChatMessage(role=MessageRole.USER, content=messages)]
        if isinstance(messages, ChatMessage):
            return [messages]
        if isinstance(messages, Sequence) and all(isinstance(m, ChatMessage) for m in messages):
            return list(messages)
        raise TypeError(
            f"{self!r}: messages must be a string or a list of ChatMessage, got {type(messages).__name__}"
        )

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        return {"output": self.llm.chat(self._messages(kwargs["messages"]))}

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        return {"output": await self.llm.achat(self._messages(kwargs["messages"]))}

    def __repr__(self) -> str:
        return f"LLMChatComponent(llm={getattr(self.llm, 'model', type(self.llm).__name__)})"


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


class ChainableMixin(ABC):
    """Something that becomes a component when put in a pipeline (``as_query_component``)."""

    @abstractmethod
    def _as_query_component(self, **kwargs: Any) -> QueryComponent:
        """The component for this object."""

    def as_query_component(self, partial: dict[str, Any] | None = None, **kwargs: Any) -> QueryComponent:
        component = self._as_query_component(**kwargs)
        component.partial(**(partial or {}))
        return component


@dataclass
class Link:
    """A link from one module's output to another module's input."""

    src: str
    dest: str
    src_key: str | None = None
    dest_key: str | None = None
    condition_fn: Callable[[Any], bool] | None = None
    input_fn: Callable[[Any], Any] | None = None


class ComponentIntermediates:
    """What one module got and gave in a run (``run_with_intermediates``)."""

    def __init__(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.inputs = inputs
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"ComponentIntermediates(inputs={self.inputs!s}, outputs={self.outputs!s})"


def _as_component(key: str, module: Any) -> QueryComponent:
    if isinstance(module, QueryComponent):
        return module
    as_qc = getattr(module, "as_query_component", None)
    if callable(as_qc):
        component = as_qc()
        if isinstance(component, QueryComponent):
            return component
    if callable(getattr(module, "achat", None)) and callable(getattr(module, "chat", None)):
        return LLMChatComponent(module)
    hint = " (wrap a function as FnComponent(fn=...))" if callable(module) else ""
    raise TypeError(
        f"module {key!r} is a {type(module).__name__}, not a pipeline component{hint}; a module is a "
        "QueryComponent (FnComponent, StatefulFnComponent, InputComponent, a QueryPipeline, ...) "
        "or a chat model"
    )


class _RunState:
    """The bookkeeping of one run: inputs gathered per module, what ran, what was skipped."""

    def __init__(self, keys: Iterable[str], given: Mapping[str, Mapping[str, Any]]) -> None:
        self.inputs: dict[str, dict[str, Any]] = {k: {} for k in keys}
        self.fed: set[str] = set()  # got at least one value through a link
        for key, values in given.items():
            self.inputs[key] = dict(values)
        self.done: set[str] = set()  # ran or skipped
        self.ran: dict[str, dict[str, Any]] = {}  # key -> output dict, in run order
        self.intermediates: dict[str, ComponentIntermediates] = {}


class QueryPipeline(QueryComponent):
    """Named modules and the links between them: a DAG run in dependency order.

    Build it with ``chain=[...]`` (a straight line) or ``modules={...}`` plus ``links=[...]``,
    or later with ``add_chain`` / ``add_modules`` / ``add`` / ``add_link``. ``state`` is shared
    with every ``StatefulFnComponent`` (see ``update_state``). A pipeline is itself a component,
    so it can be a module of another pipeline.
    """

    def __init__(
        self,
        callback_manager: Any = None,
        chain: Sequence[Any] | None = None,
        modules: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = None,
        state: dict[str, Any] | None = None,
        verbose: bool = False,
        num_workers: int = 4,
    ) -> None:
        super().__init__()
        if callback_manager is not None:
            warn_callback_manager("QueryPipeline")
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
        self.callback_manager = None
        self.module_dict: dict[str, QueryComponent] = {}
        self._links: dict[str, list[Link]] = {}  # src -> outgoing links, in the order added
        self.verbose = verbose
        self.num_workers = num_workers
        self.state: dict[str, Any] = {} if state is None else state
        if chain is not None:
            if modules is not None or links is not None:
                raise ValueError("QueryPipeline: give either chain=[...] or modules={...} (with links=[...]), not both")
            self.add_chain(chain)
        elif modules is not None:
            self.add_modules(modules)
            if links is not None:
                self.add_links(links)
        elif links is not None:
            raise ValueError("QueryPipeline: links=[...] needs modules={...} to link")
        self._share_state(self.state)

    # building ---------------------------------------------------------------------------
    def add(self, module_key: str, module: Any) -> None:
        """Add one module under ``module_key``."""
        if not isinstance(module_key, str) or not module_key:
            raise TypeError(f"a module key must be a non-empty string, got {module_key!r}")
        if module_key in self.module_dict:
            raise ValueError(f"module {module_key!r} is already in the pipeline; module keys must be unique")
        self.module_dict[module_key] = _as_component(module_key, module)
        self._links.setdefault(module_key, [])
        self._share_state(self.state)

    def add_modules(self, module_dict: Mapping[str, Any]) -> None:
        """Add several modules, ``{key: module}``."""
        for key, module in module_dict.items():
            self.add(key, module)

    def add_chain(self, chain: Sequence[Any]) -> None:
        """Add modules (or keys of modules already added) linked one after the other."""
        keys: list[str] = []
        for item in chain:
            if isinstance(item, str):
                self._known(item, "add_chain")
                keys.append(item)
            else:
                key = self._free_key(item)
                self.add(key, item)
                keys.append(key)
        for src, dest in zip(keys, keys[1:]):
            self.add_link(src, dest)

    def _free_key(self, module: Any) -> str:
        name = _fn_name(getattr(module, "fn", None)) if hasattr(module, "fn") else type(module).__name__
        key = f"{len(self.module_dict)}_{name}"
        n = 1
        while key in self.module_dict:
            n += 1
            key = f"{len(self.module_dict)}_{name}_{n}"
        return key

    def add_link(
        self,
        src: str,
        dest: str,
        src_key: str | None = None,
        dest_key: str | None = None,
        condition_fn: Callable[[Any], bool] | None = None,
        input_fn: Callable[[Any], Any] | None = None,
    ) -> None:
        """Link ``src``'s output (``src_key`` if it has several) to ``dest``'s input
        (``dest_key`` if it takes several); ``input_fn`` transforms the value, the link is
        taken only if ``condition_fn(value)`` is true (on the value before ``input_fn``)."""
        self._known(src, "add_link")
        self._known(dest, "add_link")
        for name, fn in (("condition_fn", condition_fn), ("input_fn", input_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"add_link {src!r} -> {dest!r}: {name} must be callable, got {type(fn).__name__}")
        path = self._path(dest, src)
        if path is not None:
            raise ValueError(
                f"add_link {src!r} -> {dest!r} would make a cycle ({' -> '.join([src, *path])}); a "
                "query pipeline is a DAG: loop over agent steps instead (QueryPipelineAgentWorker "
                "runs the pipeline once per step)"
            )
        self._links[src].append(Link(src, dest, src_key, dest_key, condition_fn, input_fn))

    def add_links(self, links: Sequence[Link]) -> None:
        """Add several ``Link`` objects."""
        for link in links:
            if not isinstance(link, Link):
                raise TypeError(f"add_links takes Link objects, got {type(link).__name__}")
            self.add_link(link.src, link.dest, link.src_key, link.dest_key, link.condition_fn, link.input_fn)

    def _known(self, key: str, where: str) -> None:
        if key not in self.module_dict:
            raise ValueError(
                f"{where}: no module {key!r} in the pipeline; its modules are "
                f"{list(self.module_dict)} (add it first with add({key!r}, module) or add_modules)"
            )

    def _path(self, start: str, goal: str) -> list[str] | None:
        """A path of module keys from ``start`` to ``goal`` along links, if there is one."""
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen: set[str] = set()
        while stack:
            key, path = stack.pop()
            if key == goal:
                return path
            if key in seen:
                continue
            seen.add(key)
            stack.extend((link.dest, [*path, link.dest]) for link in self._links.get(key, ()))
        return None

    @property
    def links(self) -> list[Link]:
        """Every link, in the order added."""
        return [link for out in self._links.values() for link in out]

    def _parents(self) -> dict[str, set[str]]:
        parents: dict[str, set[str]] = {k: set() for k in self.module_dict}
        for link in self.links:
            parents[link.dest].add(link.src)
        return parents

    def get_root_keys(self) -> list[str]:
        """Modules no link leads to (where a run starts)."""
        parents = self._parents()
        return [k for k in self.module_dict if not parents[k]]

    def get_leaf_keys(self) -> list[str]:
        """Modules with no outgoing link."""
        return [k for k in self.module_dict if not self._links[k]]

    # state and callbacks ----------------------------------------------------------------
    @property
    def stateful_components(self) -> list[BaseStatefulComponent]:
        return _stateful(self)

    def _share_state(self, state: dict[str, Any]) -> None:
        for component in _stateful(self):
            component.state = state

    def set_state(self, state: dict[str, Any]) -> None:
        """Replace the state (the stateful components see this dict)."""
        self.state = state
        self._share_state(state)

    def update_state(self, state: dict[str, Any]) -> None:
        """Merge ``state`` into ``pipeline.state``; the stateful components then see ``state``
        itself (as in LlamaIndex 0.12.52, whose agent worker relies on it)."""
        if not isinstance(state, dict):
            raise TypeError(f"update_state takes a dict, got {type(state).__name__}")
        self.state.update(state)
        self._share_state(state)

    def reset_state(self) -> None:
        self.set_state({})

    def set_callback_manager(self, callback_manager: Any) -> None:
        """Accepted for compatibility; has no effect (nbagent reports steps as events)."""
        if callback_manager is not None:
            warn_callback_manager("QueryPipeline.set_callback_manager")

    # running ----------------------------------------------------------------------------
    def _root_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        roots = self.get_root_keys()
        if len(roots) != 1:
            raise ValueError(
                f"run() needs a pipeline with exactly one root module, this one has "
                f"{roots or 'none'}; give each root its inputs with run_multi({{key: {{...}}}})"
            )
        root = roots[0]
        module = self.module_dict[root]
        free = module.free_req_input_keys
        if args:
            if len(args) > 1 or kwargs:
                raise ValueError(
                    "run() takes either one positional input or keyword inputs, not "
                    f"{len(args)} positional and {len(kwargs)} keyword"
                )
            if len(free) != 1:
                raise ValueError(
                    f"run(value): the root module {root!r} must take exactly one required input "
                    f"to receive it, it takes {_names(free)}; name them: run(name=value)"
                )
            kwargs = {next(iter(free)): args[0]}
        if len(free) == 1 and len(kwargs) == 1:  # one value for one input: names need not match
            kwargs = {next(iter(free)): next(iter(kwargs.values()))}
        return root, kwargs

    def _check_roots(self, module_input_dict: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        if not isinstance(module_input_dict, Mapping):
            raise TypeError(f"run_multi takes {{module_key: {{input: value}}}}, got {type(module_input_dict).__name__}")
        roots = self.get_root_keys()
        unknown = [k for k in module_input_dict if k not in roots]
        if unknown:
            raise ValueError(
                f"run_multi: {unknown} are not root modules of the pipeline; inputs go to its "
                f"roots {roots}"
            )
        given = {k: dict(v) for k, v in module_input_dict.items()}
        for root in roots:
            if root not in given:
                missing = self.module_dict[root].free_req_input_keys
                if missing:
                    raise ValueError(
                        f"run_multi: root module {root!r} needs inputs {_names(missing)}; "
                        f"give them as {{{root!r}: {{...}}}}"
                    )
                given[root] = {}
        if not roots:
            raise ValueError("the pipeline has no modules to run; add some with add_modules or add_chain")
        return given

    def _ready(self, rs: _RunState, roots: set[str], parents: dict[str, set[str]]) -> tuple[list[str], list[str]]:
        """Modules that may run now, and modules to skip (none of their links was taken)."""
        ready: list[str] = []
        skip: list[str] = []
        for key, module in self.module_dict.items():
            if key in rs.done or not parents[key] <= rs.done:
                continue
            if key not in roots and key not in rs.fed:
                skip.append(key)
                continue
            missing = module.free_req_input_keys - set(rs.inputs[key])
            if missing:
                raise ValueError(
                    f"module {key!r} cannot run: missing input(s) {_names(missing)}; it got "
                    f"{_names(rs.inputs[key])} and takes required {_names(module.free_req_input_keys)}, "
                    f"optional {_names(module.input_keys.optional_keys)}. Link each with "
                    f"add_link(src, {key!r}, dest_key=...) or fix it with partial()"
                )
            ready.append(key)
        return ready, skip

    def _deliver(self, key: str, output: dict[str, Any], rs: _RunState) -> None:
        for link in self._links[key]:
            if link.src_key is None:
                if len(output) != 1:
                    raise ValueError(
                        f"link {key!r} -> {link.dest!r}: {key!r} returned {len(output)} outputs "
                        f"{_names(output)}, the link needs one; choose it with src_key=..."
                    )
                value = next(iter(output.values()))
            elif link.src_key in output:
                value = output[link.src_key]
            else:
                raise ValueError(
                    f"link {key!r} -> {link.dest!r}: src_key {link.src_key!r} is not an output of "
                    f"{key!r}; it returned {_names(output)}"
                )
            if link.condition_fn is not None and not link.condition_fn(value):
                continue
            if link.input_fn is not None:
                value = link.input_fn(value)
            dest_key = link.dest_key
            if dest_key is None:
                free = self.module_dict[link.dest].free_req_input_keys
                if len(free) != 1:
                    raise ValueError(
                        f"link {key!r} -> {link.dest!r} has no dest_key, and {link.dest!r} takes "
                        f"{len(free)} required inputs {_names(free)}; name one with dest_key=..."
                    )
                dest_key = next(iter(free))
            rs.inputs[link.dest][dest_key] = value
            rs.fed.add(link.dest)

    def _begin(self, given: dict[str, dict[str, Any]]) -> tuple[_RunState, set[str], dict[str, set[str]]]:
        return _RunState(self.module_dict, given), set(self.get_root_keys()), self._parents()

    def _show(self, key: str, inputs: dict[str, Any]) -> None:
        if self.verbose:
            lines = [f"> Running module {key} with input: "]
            for name, value in inputs.items():
                text = str(value)
                lines.append(f"{name}: {text[:200] + '...' if len(text) > 200 else text}")
            print("\n".join(lines) + "\n")

    def _record(self, key: str, inputs: dict[str, Any], output: dict[str, Any], rs: _RunState) -> None:
        rs.intermediates[key] = ComponentIntermediates(inputs=inputs, outputs=output)
        rs.ran[key] = output
        rs.done.add(key)
        self._deliver(key, output, rs)

    def _run_graph(self, given: dict[str, dict[str, Any]]) -> _RunState:
        rs, roots, parents = self._begin(given)
        while True:
            ready, skip = self._ready(rs, roots, parents)
            rs.done.update(skip)
            if not ready and not skip:
                return rs
            for key in ready:
                inputs = dict(rs.inputs[key])
                self._show(key, inputs)
                self._record(key, inputs, self.module_dict[key].run_component(**inputs), rs)

    async def _arun_graph(self, given: dict[str, dict[str, Any]]) -> _RunState:
        rs, roots, parents = self._begin(given)
        limit = asyncio.Semaphore(self.num_workers)

        async def one(key: str, inputs: dict[str, Any]) -> dict[str, Any]:
            async with limit:
                return await self.module_dict[key].arun_component(**inputs)

        while True:
            ready, skip = self._ready(rs, roots, parents)
            rs.done.update(skip)
            if not ready and not skip:
                return rs
            batch = [(key, dict(rs.inputs[key])) for key in ready]
            for key, inputs in batch:
                self._show(key, inputs)
            outputs = await asyncio.gather(*(one(key, inputs) for key, inputs in batch))
            for (key, inputs), output in zip(batch, outputs):
                self._record(key, inputs, output, rs)

    def _ends(self, rs: _RunState) -> dict[str, dict[str, Any]]:
        """The outputs of the modules that ended the run: those that ran and none of whose
        links led to a module that ran."""
        return {
            key: out for key, out in rs.ran.items()
            if not any(link.dest in rs.ran for link in self._links[key])
        }

    def _single(self, rs: _RunState, return_values_direct: bool) -> Any:
        ends = self._ends(rs)
        if len(ends) != 1:
            raise ValueError(
                f"run() returns one output, but {len(ends)} modules ended the run: {list(ends)}; "
                "use run_multi to get each of them"
            )
        out = next(iter(ends.values()))
        if return_values_direct and isinstance(out, dict) and len(out) == 1:
            return next(iter(out.values()))
        return out

    def _batch(self, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        lengths = {len(v) for v in kwargs.values()}
        if len(lengths) != 1:
            raise ValueError(f"batch=True needs lists of one length for every input, got lengths {sorted(lengths)}")
        return [dict(zip(kwargs, values)) for values in zip(*kwargs.values())]

    def _no_callbacks(self, callback_manager: Any) -> None:
        if callback_manager is not None:
            warn_callback_manager("QueryPipeline.run", stacklevel=5)

    def _no_batch_here(self, batch: bool | None, where: str) -> None:
        if batch is not None:
            raise ValueError(f"batch is not supported by {where}; use run(..., batch=True)")

    def _sync_run(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], direct: bool, callback_manager: Any, batch: bool
    ) -> tuple[Any, dict[str, ComponentIntermediates]]:
        self._no_callbacks(callback_manager)
        root, kwargs = self._root_inputs(args, kwargs)
        if batch:
            runs = [self._run_graph({root: one}) for one in self._batch(kwargs)]
            return [self._single(rs, direct) for rs in runs], {}
        rs = self._run_graph(self._check_roots({root: kwargs}))
        return self._single(rs, direct), rs.intermediates

    async def _async_run(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], direct: bool, callback_manager: Any, batch: bool
    ) -> tuple[Any, dict[str, ComponentIntermediates]]:
        self._no_callbacks(callback_manager)
        root, kwargs = self._root_inputs(args, kwargs)
        if batch:
            runs = await asyncio.gather(*(self._arun_graph({root: one}) for one in self._batch(kwargs)))
            return [self._single(rs, direct) for rs in runs], {}
        rs = await self._arun_graph(self._check_roots({root: kwargs}))
        return self._single(rs, direct), rs.intermediates

    def run(
        self,
        *args: Any,
        return_values_direct: bool = True,
        callback_manager: Any = None,
        batch: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Run from the one root module; returns the output of the module that ended the run
        (its value alone if it has one output and ``return_values_direct``). ``batch=True``:
        every input is a list, one run per position, a list of results."""
        return self._sync_run(args, kwargs, return_values_direct, callback_manager, batch)[0]

    def run_with_intermediates(
        self,
        *args: Any,
        return_values_direct: bool = True,
        callback_manager: Any = None,
        batch: bool | None = None,
        **kwargs: Any,
    ) -> tuple[Any, dict[str, ComponentIntermediates]]:
        """``run``, plus what each module got and gave."""
        self._no_batch_here(batch, "run_with_intermediates")
        return self._sync_run(args, kwargs, return_values_direct, callback_manager, False)

    async def arun(
        self,
        *args: Any,
        return_values_direct: bool = True,
        callback_manager: Any = None,
        batch: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Async ``run``: modules that are ready together run concurrently (``num_workers``)."""
        return (await self._async_run(args, kwargs, return_values_direct, callback_manager, batch))[0]

    async def arun_with_intermediates(
        self,
        *args: Any,
        return_values_direct: bool = True,
        callback_manager: Any = None,
        batch: bool | None = None,
        **kwargs: Any,
    ) -> tuple[Any, dict[str, ComponentIntermediates]]:
        """Async ``run_with_intermediates``."""
        self._no_batch_here(batch, "arun_with_intermediates")
        return await self._async_run(args, kwargs, return_values_direct, callback_manager, False)

    def run_multi(self, module_input_dict: Mapping[str, Any], callback_manager: Any = None) -> dict[str, Any]:
        """Run with inputs for several roots, ``{root_key: {input: value}}``; returns
        ``{module_key: outputs}`` for every module that ended the run."""
        self._no_callbacks(callback_manager)
        return self._ends(self._run_graph(self._check_roots(module_input_dict)))

    async def arun_multi(self, module_input_dict: Mapping[str, Any], callback_manager: Any = None) -> dict[str, Any]:
        self._no_callbacks(callback_manager)
        return self._ends(await self._arun_graph(self._check_roots(module_input_dict)))

    # a pipeline is a component too -------------------------------------------------------
    @property
    def input_keys(self) -> InputKeys:
        roots = self.get_root_keys()
        if len(roots) != 1:
            raise ValueError(f"a pipeline used as a module needs exactly one root, this one has {roots}")
        return self.module_dict[roots[0]].input_keys

    @property
    def output_keys(self) -> OutputKeys:
        leaves = self.get_leaf_keys()
        if len(leaves) != 1:
            raise ValueError(f"a pipeline used as a module needs exactly one leaf, this one has {leaves}")
        return self.module_dict[leaves[0]].output_keys

    def validate_component_inputs(self, input: dict[str, Any]) -> dict[str, Any]:
        return input

    def validate_component_outputs(self, output: dict[str, Any]) -> dict[str, Any]:
        return output

    @property
    def sub_query_components(self) -> list[QueryComponent]:
        return list(self.module_dict.values())

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        return self.run(return_values_direct=False, **kwargs)

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        return await self.arun(return_values_direct=False, **kwargs)

    def __repr__(self) -> str:
        return f"QueryPipeline(modules={list(self.module_dict)}, links={len(self.links)})"


def _stateful(component: QueryComponent) -> list[BaseStatefulComponent]:
    found: list[BaseStatefulComponent] = []
    for sub in component.sub_query_components:
        if isinstance(sub, BaseStatefulComponent):
            found.append(sub)
        if sub.sub_query_components:
            found.extend(_stateful(sub))
    return found
