"""QueryPipeline: named modules and the links between them, a DAG run in dependency order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbagent._compat import warn_callback_manager
from nbagent.query_pipeline.components import (
    BaseStatefulComponent,
    InputKeys,
    OutputKeys,
    QueryComponent,
    _fn_name,
    _names,
)
from nbagent.query_pipeline.model import LLMChatComponent

__all__ = ["Link", "ComponentIntermediates", "QueryPipeline"]


@dataclass
class Link:
    """A link from one module's output to another module's input."""

    #: the module the value comes from
    src: str
    #: the module the value goes to
    dest: str
    #: which of ``src``'s outputs (None: its only one)
    src_key: str | None = None
    #: which of ``dest``'s inputs (None: its only required one)
    dest_key: str | None = None
    #: the link is taken only if this returns true for the value (None: always)
    condition_fn: Callable[[Any], bool] | None = None
    #: turns the value into ``dest``'s input (None: passed as it is)
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
        "QueryComponent (FnComponent, StatefulFnComponent, InputComponent, a QueryPipeline, ...), "
        "a chat model or a PromptTemplate"
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
        """The components that share the pipeline's ``state`` (nested pipelines' included)."""
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
        """Start again from an empty ``state``, for the pipeline and its stateful components
        (an agent's next task should not see the last one's)."""
        self.set_state({})

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
            warn_callback_manager("QueryPipeline.run", stacklevel=4)

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

    def _multi_args(self, callback_manager: Any, batch: bool) -> None:
        self._no_callbacks(callback_manager)
        if batch:
            raise ValueError(
                "run_multi(batch=True) is not supported by nbagent's QueryPipeline; call run_multi "
                "once per input (run(..., batch=True) batches a one-root pipeline)"
            )

    def run_multi(
        self, module_input_dict: Mapping[str, Any], callback_manager: Any = None, batch: bool = False
    ) -> dict[str, Any]:
        """Run with inputs for several roots, ``{root_key: {input: value}}``; returns
        ``{module_key: outputs}`` for every module that ended the run."""
        self._multi_args(callback_manager, batch)
        return self._ends(self._run_graph(self._check_roots(module_input_dict)))

    def run_multi_with_intermediates(
        self, module_input_dict: Mapping[str, Any], callback_manager: Any = None
    ) -> tuple[dict[str, Any], dict[str, ComponentIntermediates]]:
        """``run_multi``, plus what each module got and gave."""
        self._multi_args(callback_manager, False)
        rs = self._run_graph(self._check_roots(module_input_dict))
        return self._ends(rs), rs.intermediates

    async def arun_multi(
        self, module_input_dict: Mapping[str, Any], callback_manager: Any = None, batch: bool = False
    ) -> dict[str, Any]:
        """Async ``run_multi``."""
        self._multi_args(callback_manager, batch)
        return self._ends(await self._arun_graph(self._check_roots(module_input_dict)))

    async def arun_multi_with_intermediates(
        self, module_input_dict: Mapping[str, Any], callback_manager: Any = None
    ) -> tuple[dict[str, Any], dict[str, ComponentIntermediates]]:
        """Async ``run_multi_with_intermediates``."""
        self._multi_args(callback_manager, False)
        rs = await self._arun_graph(self._check_roots(module_input_dict))
        return self._ends(rs), rs.intermediates

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
