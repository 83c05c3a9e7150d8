"""Views and late-bound classes, attached from above.

A core class (a task, a message, a tool, a workflow) keeps ``_repr_html_`` so Jupyter shows
it, but does not import the views: it asks this registry (``html_view(self)``), which the view
layer fills. Lookup walks the object's class and its bases; for each class, a registration by
the class itself comes first, then one by its dotted name (``"nbagent.schema.Task"``, nothing
imported until it is needed), as IPython's ``for_type`` / ``for_type_by_name`` do. A view is a
callable or a ``"package.module:name"`` string, imported on first use.

``nbagent._wiring`` registers nbagent's own views when ``nbagent`` is imported; anyone can add
one (``nbagent.register_view``): a later registration for the same class and kind wins, and
``unregister`` puts back the one before it.

Roles are the same idea for a class an upper layer defines and a lower one must create (a
worker's ``as_agent`` makes the ``AgentRunner`` that wraps it): ``provided("agent_runner")``.
Stdlib only.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any, Union

__all__ = [
    "ViewRegistry",
    "ViewMissingError",
    "views",
    "register_view",
    "html_view",
    "show",
    "provide",
    "provided",
]

Target = Union[type, str]  # a class, or its dotted name "package.module.Class"
Provider = Union[Callable[..., Any], str]  # a callable, or "package.module:name"


class ViewMissingError(LookupError):
    """No view of the asked kind is registered for the object's class or its bases."""


def _key(target: Target) -> type | str:
    if isinstance(target, type):
        return target
    if isinstance(target, str) and target and all(p.isidentifier() for p in target.split(".")):
        return target
    raise TypeError(
        f"a view's target must be a class or its dotted name like 'package.module.Class', got {target!r}"
    )


def _check_provider(view: Provider) -> None:
    if callable(view):
        return
    if isinstance(view, str):
        module, sep, name = view.partition(":")
        parts = [*module.split("."), *name.split(".")]
        if sep and all(p.isidentifier() for p in parts):
            return
    raise TypeError(f"a view must be a callable or a 'package.module:name' string, got {view!r}")


def _resolve(provider: Provider) -> Any:
    if not isinstance(provider, str):
        return provider
    module, _, name = provider.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class ViewRegistry:
    """Views by (class or dotted name, kind). Kinds are free-form: ``"html"`` (what
    ``_repr_html_`` returns), ``"draw"``, ``"panel"``, ``"widget"``..."""

    def __init__(self) -> None:
        self._views: dict[tuple[type | str, str], list[Provider]] = {}
        self._cache: dict[tuple[type, str], Callable[..., Any] | None] = {}
        self._resolved: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._generation = 0  # bumped by every change, so a lookup racing one caches nothing

    def register(self, target: Target, view: Provider, *, kind: str = "html") -> None:
        """Show objects of ``target`` (and its subclasses without a view of their own) with
        ``view(obj, ...)`` for ``kind``; replaces the view registered before, until
        ``unregister``."""
        key = _key(target)
        _check_provider(view)
        with self._lock:
            self._views.setdefault((key, kind), []).append(view)
            self._changed()

    def unregister(self, target: Target, *, kind: str = "html") -> None:
        """Drop the latest view registered for ``target`` and ``kind``: the one before it, if
        any, applies again."""
        key = _key(target)
        with self._lock:
            stack = self._views.get((key, kind))
            if not stack:
                raise KeyError(f"no {kind!r} view is registered for {target!r}")
            stack.pop()
            if not stack:
                del self._views[(key, kind)]
            self._changed()

    def _changed(self) -> None:
        self._generation += 1
        self._cache.clear()

    def registered(self) -> list[tuple[type | str, str, Provider]]:
        """Every (target, kind, view) in force, in registration order."""
        with self._lock:
            return [(key, kind, stack[-1]) for (key, kind), stack in self._views.items()]

    def lookup(self, obj: object, kind: str = "html") -> Callable[..., Any] | None:
        """The view for ``obj``'s class (or its nearest base that has one), or None."""
        return self.for_class(type(obj), kind)

    def for_class(self, cls: type, kind: str = "html") -> Callable[..., Any] | None:
        """The view objects of class ``cls`` get for ``kind``, or None."""
        try:
            return self._cache[(cls, kind)]
        except KeyError:
            pass
        generation = self._generation
        found: Provider | None = None
        views = self._views
        for klass in cls.__mro__:
            stack = views.get((klass, kind)) or views.get((f"{klass.__module__}.{klass.__qualname__}", kind))
            if stack:
                found = stack[-1]
                break
        view = None if found is None else self._callable(found)
        if generation == self._generation:
            self._cache[(cls, kind)] = view
        return view

    def _callable(self, provider: Provider) -> Callable[..., Any]:
        if not isinstance(provider, str):
            return provider
        view = self._resolved.get(provider)
        if view is None:
            view = self._resolved[provider] = _resolve(provider)
        return view


views = ViewRegistry()  # the one registry: nbagent's views, and anyone's


def register_view(target: Target, view: Provider, *, kind: str = "html") -> None:
    """Show objects of class ``target`` (a class or ``"package.module.Class"``) with ``view``
    (a callable taking the object, or ``"package.module:name"``). ``kind="html"`` is what
    Jupyter shows; other kinds are what methods like ``Workflow.draw`` return.

    Example:

    >>> from nbagent import ScriptedLLM, register_view
    >>> class QuizModel(ScriptedLLM):
    ...     "A model for a class quiz, shown as one line in the notebook."
    >>> register_view(QuizModel, lambda llm: f"<b>quiz model</b>, {len(llm.replies)} answers")
    >>> QuizModel(["4", "Paris"])._repr_html_()
    '<b>quiz model</b>, 2 answers'
    >>> from nbagent.registry import views
    >>> views.unregister(QuizModel)  # back to the view of ScriptedLLM
    >>> QuizModel(["4"])._repr_html_().startswith('<div class="nbagent')
    True
    """
    views.register(target, view, kind=kind)


def html_view(obj: object) -> str | None:
    """The HTML of ``obj`` from its registered view; None (Jupyter then shows the text repr)
    when there is none."""
    view = views.lookup(obj, "html")
    return None if view is None else view(obj)


def show(obj: object, kind: str, /, *args: Any, **options: Any) -> Any:
    """``view(obj, *args, **options)`` with the view registered for ``kind``."""
    view = views.lookup(obj, kind)
    if view is None:
        name = type(obj).__name__
        raise ViewMissingError(
            f"no {kind!r} view registered for {name}; register one with "
            f"nbagent.register_view({name}, view, kind={kind!r})"
        )
    return view(obj, *args, **options)


# ----- roles: classes from upper layers that lower ones create ---------------------------------

_ROLES: dict[str, Provider] = {}
_ROLE_VALUES: dict[str, Any] = {}


def provide(role: str, target: Provider) -> None:
    """Name what ``provided(role)`` gives: an object, or ``"package.module:name"`` (imported
    on first use)."""
    if not isinstance(role, str) or not role:
        raise TypeError(f"a role is a non-empty string, got {role!r}")
    if isinstance(target, str):
        _check_provider(target)
    _ROLES[role] = target
    _ROLE_VALUES.pop(role, None)


def provided(role: str) -> Any:
    """What ``role`` names (resolved once)."""
    try:
        return _ROLE_VALUES[role]
    except KeyError:
        pass
    if role not in _ROLES:
        raise LookupError(f"no role {role!r} is provided; roles: {sorted(_ROLES)}")
    value = _ROLE_VALUES[role] = _resolve(_ROLES[role])
    return value
