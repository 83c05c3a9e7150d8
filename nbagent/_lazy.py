"""A module imported when one of its names is first read, so ``import nbagent`` defines no model.

Defining the first pydantic model loads pydantic's model machinery (about 40 ms, more than
the rest of ``import nbagent`` together); the runner, the engine and ``FunctionTool`` need
the models only once a task, a step or a tool is made. A module that uses a model module at
run time reads it through a ``LazyModule``::

    @LazyModule
    def schema() -> ModuleType:  # imported on first use: ``import nbagent`` defines no model
        from nbagent import schema as module
        return module

    ...  # later, in a function: schema.TaskStep(...)

The import stays an ``import`` statement, inside the loader, so the layer contracts and the
cycle check see it. The first read of a name imports the module (Python's import lock makes
that thread-safe) and keeps the value on the proxy: every later read is one instance-dict hit,
as cheap as reading a module's attribute.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["LazyModule"]


class LazyModule:
    """Stands for the module ``load`` returns; see the module's docstring."""

    def __init__(self, load: Callable[[], ModuleType]) -> None:
        object.__setattr__(self, "_LazyModule__load", load)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):  # copy, pickle, inspect, doctest probes
            raise AttributeError(name)
        value = getattr(self.__load(), name)
        object.__setattr__(self, name, value)  # the next read finds it here
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"set {name!r} on the module itself, not on the lazy name that stands for it")

    def __repr__(self) -> str:
        return f"<lazy module from {self.__load.__qualname__}>"
