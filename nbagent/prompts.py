"""Prompts as data: a template object and the get_prompts/update_prompts protocol.

``PromptTemplate`` fills ``{name}`` placeholders the way the reference does: a placeholder
whose name was not given is left as written, so JSON braces in a template (``{"query": ...}``)
need no escaping. ``PromptMixin`` gives any object ``get_prompts()`` / ``update_prompts()``
with the reference's ``"module:key"`` addressing of sub-modules; unlike the reference, a key
that names no prompt is an error rather than silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nbagent._lazy import LazyModule
from nbagent.registry import provided

if TYPE_CHECKING:
    from nbagent.messages import ChatMessage
    from nbagent.query_pipeline.model import PromptComponent


@LazyModule
def messages() -> ModuleType:  # imported on first use: ``import nbagent`` defines no model
    from nbagent import messages as module

    return module


__all__ = ["PromptTemplate", "PromptMixin", "PromptDictType", "as_template", "template_text"]

_PLACEHOLDER_RE = re.compile(r"\{([^{}]+)\}")


class PromptTemplate:
    """A text template with ``{name}`` placeholders; ``partial_format`` pre-fills some."""

    def __init__(self, template: str, **kwargs: Any) -> None:
        if not isinstance(template, str):
            raise TypeError(f"a prompt template must be a str, got {type(template).__name__}")
        self.template = template
        self.kwargs: dict[str, Any] = dict(kwargs)

    @property
    def template_vars(self) -> list[str]:
        """The placeholder names in the template, in order (``str.format`` syntax)."""
        import string  # here: import nbagent does not load it

        names: list[str] = []
        try:
            parsed = list(string.Formatter().parse(self.template))
        except ValueError:  # unbalanced braces: fall back to the lenient pattern
            parsed = [("", m.group(1), "", None) for m in _PLACEHOLDER_RE.finditer(self.template)]
        for _, name, _, _ in parsed:
            if name and name not in names:
                names.append(name)
        return names

    def get_template(self) -> str:
        """The raw template text (the reference's accessor).

        Example:

        >>> from nbagent import PromptTemplate
        >>> PromptTemplate("Hi {name}").get_template()
        'Hi {name}'
        """
        return self.template

    def partial_format(self, **kwargs: Any) -> PromptTemplate:
        """A copy with some placeholders pre-filled; ``format`` fills the rest.

        Example:

        >>> from nbagent import PromptTemplate
        >>> PromptTemplate("{a} and {b}").partial_format(a="salt").format(b="pepper")
        'salt and pepper'
        """
        return PromptTemplate(self.template, **{**self.kwargs, **kwargs})

    def format(self, **kwargs: Any) -> str:
        """The text with each given placeholder replaced; unknown ``{...}`` stay as written.

        One pass, so a value that itself contains ``{name}`` is never filled again.

        Example:

        >>> from nbagent import PromptTemplate
        >>> PromptTemplate("Hello {name}, {greeting}").format(name="Ada")
        'Hello Ada, {greeting}'
        """
        values = {**self.kwargs, **kwargs}
        return _PLACEHOLDER_RE.sub(
            lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
            self.template,
        )

    def format_messages(self, **kwargs: Any) -> list[ChatMessage]:
        """The filled text as one user message.

        Example:

        >>> from nbagent import PromptTemplate
        >>> [(m.role.value, m.content) for m in PromptTemplate("Hi {name}").format_messages(name="Ada")]
        [('user', 'Hi Ada')]
        """
        return [messages.ChatMessage(role=messages.MessageRole.USER, content=self.format(**kwargs))]

    def as_query_component(self, partial: dict[str, Any] | None = None, **kwargs: Any) -> PromptComponent:
        """This template as a query-pipeline module (``nbagent.query_pipeline``), with the
        ``partial`` placeholders fixed."""
        component = provided("prompt_component")(self, llm=kwargs.get("llm"))
        component.partial(**(partial or {}))
        return component

    def __str__(self) -> str:
        return self.template

    def __repr__(self) -> str:
        text = self.template if len(self.template) <= 60 else self.template[:57] + "..."
        return f"PromptTemplate({text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PromptTemplate):
            return self.template == other.template and self.kwargs == other.kwargs
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.template)


PromptDictType = dict[str, PromptTemplate]


def as_template(value: str | PromptTemplate, name: str = "prompt") -> PromptTemplate:
    """A ``PromptTemplate`` from a str or a template (anything with ``get_template()``)."""
    if isinstance(value, PromptTemplate):
        return value
    if isinstance(value, str):
        return PromptTemplate(value)
    getter = getattr(value, "get_template", None)
    if callable(getter):  # another library's template object
        text = getter()
        if isinstance(text, str):
            return PromptTemplate(text)
    raise TypeError(f"{name} must be a str or a PromptTemplate, got {type(value).__name__}")


def template_text(value: str | PromptTemplate, name: str = "prompt") -> str:
    """The raw text of a str or a template."""
    return as_template(value, name).template


class PromptMixin:
    """``get_prompts()`` / ``update_prompts()`` over an object and its prompt sub-modules.

    Subclasses implement ``_get_prompts`` (own prompts by key), ``_update_prompts`` (apply
    a dict of own keys) and optionally ``_get_prompt_modules`` (name -> sub-object with
    prompts). A sub-module's prompt is addressed as ``"module:key"``.
    """

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _get_prompt_modules(self) -> dict[str, PromptMixin]:
        return {}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        return None

    def get_prompts(self) -> PromptDictType:
        """Every prompt this object uses, its sub-modules' as ``"module:key"``.

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
        >>> sorted(agent.get_prompts())  # change one with update_prompts({key: new})
        ['agent_worker:system_prompt']
        """
        prompts = dict(self._get_prompts())
        for module_name, module in self._get_prompt_modules().items():
            for key, prompt in module.get_prompts().items():
                prompts[f"{module_name}:{key}"] = prompt
        return prompts

    def update_prompts(self, prompts_dict: Mapping[str, str | PromptTemplate]) -> None:
        """Replace prompts by key (values: ``PromptTemplate`` or str).

        Every key is checked before anything changes: a key that names no prompt raises
        ``KeyError`` listing the keys there are.
        """
        if not isinstance(prompts_dict, Mapping):
            raise TypeError(f"update_prompts takes a dict of key -> prompt, got {type(prompts_dict).__name__}")
        known = self.get_prompts()
        unknown = [k for k in prompts_dict if k not in known]
        if unknown:
            raise KeyError(
                f"update_prompts: no prompt named {', '.join(map(repr, unknown))}; "
                f"this {type(self).__name__} has {', '.join(map(repr, known)) or 'no prompts'}"
            )
        own: PromptDictType = {}
        subs: dict[str, PromptDictType] = {}
        for key, value in prompts_dict.items():
            template = as_template(value, f"prompt {key!r}")
            if ":" in key:
                module_name, sub_key = key.split(":", 1)
                subs.setdefault(module_name, {})[sub_key] = template
            else:
                own[key] = template
        if own:
            self._update_prompts(own)
        modules = self._get_prompt_modules()
        for module_name, sub_dict in subs.items():
            modules[module_name].update_prompts(sub_dict)
