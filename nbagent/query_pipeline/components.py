"""Pipeline components: the contract (inputs in, a dict of outputs out) and the basic kinds."""

from __future__ import annotations

import copy

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

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
    "ChainableMixin",
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
        """The inputs a component takes, as LlamaIndex's components declare them."""
        return cls(required_keys, optional_keys)

    def all(self) -> set[str]:
        """Every input name, required or optional."""
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
        """The outputs a component returns, as LlamaIndex's components declare them."""
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
        """Accepted for compatibility; has no effect (nbagent reports steps as events)."""
        if callback_manager is not None:
            from nbagent._compat import warn_callback_manager

            warn_callback_manager(f"{type(self).__name__}.set_callback_manager")

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
        return self._validate_component_inputs(input)

    def _validate_component_inputs(self, input: dict[str, Any]) -> dict[str, Any]:
        """Override to check or convert input values (the names are already checked)."""
        return input

    def _validate_component_outputs(self, output: dict[str, Any]) -> dict[str, Any]:
        """Override to check or convert output values (the names are already checked)."""
        return output

    def validate_component_outputs(self, output: dict[str, Any]) -> dict[str, Any]:
        """Check the output dict against ``output_keys``."""
        if not isinstance(output, dict):
            raise TypeError(f"{self!r} must return a dict of outputs, got {type(output).__name__}")
        want = self.output_keys.required_keys
        if set(output) != want:
            raise ValueError(f"{self!r} returned outputs {_names(output)}, expected exactly {_names(want)}")
        return self._validate_component_outputs(output)

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


def _declared_fields(cls: type) -> dict[str, Any]:
    """The fields a component subclass declares as a pydantic model would (``separator: str =
    Field(default=":")`` or ``= ":"``): name -> default (``_MISSING_FIELD`` when required)."""
    fields: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass in (CustomQueryComponent, QueryComponent, object) or not issubclass(klass, CustomQueryComponent):
            continue
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if name.startswith("_") or "ClassVar" in str(annotation):
                continue
            default = vars(klass).get(name, _MISSING_FIELD)
            if default is not _MISSING_FIELD and hasattr(default, "get_default"):  # a pydantic FieldInfo
                default = default.get_default(call_default_factory=True)
                default = _MISSING_FIELD if repr(default) == "PydanticUndefined" else default
            fields[name] = default
    return fields


_MISSING_FIELD: Any = object()


class CustomQueryComponent(QueryComponent):
    """Subclass and give ``_input_keys``, ``_output_keys`` and ``_run_component``.

    As on the reference (whose components are pydantic models), a subclass may declare fields
    (``separator: str = Field(default=":")``): they are keyword arguments of the constructor,
    set on the instance; a required one left out, or an unknown one, is a TypeError.
    """

    def __init__(self, **fields: Any) -> None:
        super().__init__()
        declared = _declared_fields(type(self))
        unknown = sorted(set(fields) - set(declared))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unexpected keyword argument(s) {unknown}; its fields are "
                f"{sorted(declared) or 'none'}"
            )
        for name, default in declared.items():
            if name in fields:
                setattr(self, name, fields[name])
            elif default is _MISSING_FIELD:
                raise TypeError(f"{type(self).__name__} needs the field {name!r}")
            else:
                setattr(self, name, copy.copy(default))

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
        partial_dict: dict[str, Any] | None = None,
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
        if partial_dict is not None:  # the reference's field: inputs fixed ahead of time
            if not isinstance(partial_dict, dict):
                raise TypeError(f"partial_dict must be a dict of input name -> value, got {type(partial_dict).__name__}")
            self.partial(**partial_dict)

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
        """Forget the state: an empty dict (a pipeline gives its components its own)."""
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
        partial_dict: dict[str, Any] | None = None,
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
            partial_dict=partial_dict,
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


class ChainableMixin(ABC):
    """Something that becomes a component when put in a pipeline (``as_query_component``)."""

    @abstractmethod
    def _as_query_component(self, **kwargs: Any) -> QueryComponent:
        """The component for this object."""

    def as_query_component(self, partial: dict[str, Any] | None = None, **kwargs: Any) -> QueryComponent:
        """The component a pipeline runs for this object, with ``partial`` inputs already
        filled in (a pipeline calls it when it is given the object as a module)."""
        component = self._as_query_component(**kwargs)
        component.partial(**(partial or {}))
        return component
