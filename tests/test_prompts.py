"""PromptTemplate and the get_prompts/update_prompts protocol (nbagent.prompts)."""

from __future__ import annotations

import pytest

from nbagent.prompts import PromptMixin, PromptTemplate, as_template


def test_format_fills_given_names_and_leaves_json_braces() -> None:
    t = PromptTemplate('Use {tool}. Input: {"query": "Paris"} then {later}')
    assert t.format(tool="search") == 'Use search. Input: {"query": "Paris"} then {later}'
    assert t.template_vars[0] == "tool"
    assert t.get_template() == t.template


def test_format_is_one_pass_and_partial_format_prefills() -> None:
    t = PromptTemplate("{a} and {b}")
    # a value holding a placeholder is not filled again
    assert t.format(a="{b}", b="x") == "{b} and x"
    p = t.partial_format(a="1")
    assert p.format(b="2") == "1 and 2"
    assert t.format(a="A", b="B") == "A and B"  # the original is unchanged
    assert t.format_messages(a="1", b="2")[0].content == "1 and 2"


def test_as_template_rejects_non_text() -> None:
    with pytest.raises(TypeError, match="must be a str or a PromptTemplate, got int"):
        as_template(3, "react_header")  # type: ignore[arg-type]


class _Inner(PromptMixin):
    def __init__(self) -> None:
        self.header = PromptTemplate("inner {x}")

    def _get_prompts(self):
        return {"header": self.header}

    def _update_prompts(self, prompts_dict):
        if "header" in prompts_dict:
            self.header = prompts_dict["header"]


class _Outer(PromptMixin):
    def __init__(self) -> None:
        self.inner = _Inner()
        self.system = PromptTemplate("outer")

    def _get_prompts(self):
        return {"system": self.system}

    def _get_prompt_modules(self):
        return {"worker": self.inner}

    def _update_prompts(self, prompts_dict):
        if "system" in prompts_dict:
            self.system = prompts_dict["system"]


def test_mixin_addresses_sub_modules_and_accepts_strings() -> None:
    outer = _Outer()
    assert set(outer.get_prompts()) == {"system", "worker:header"}
    outer.update_prompts({"worker:header": "new {x}", "system": PromptTemplate("s")})
    assert outer.inner.header.format(x=1) == "new 1"
    assert outer.get_prompts()["system"].template == "s"


def test_unknown_key_is_an_error_and_changes_nothing() -> None:
    outer = _Outer()
    with pytest.raises(KeyError, match="no prompt named 'worker:nope'.*'system', 'worker:header'"):
        outer.update_prompts({"system": "changed", "worker:nope": "x"})
    assert outer.system.template == "outer"
