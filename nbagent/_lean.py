"""A pydantic base for the small models a long run keeps by the thousand.

Steps, step outputs, answers, chat messages and tool outputs stay in memory for the whole
life of a task. Two per-instance costs of a pydantic model are nearly always the same from
one instance to the next, so they are shared:

- the record of explicitly set fields (a set of a few hundred bytes): one shared set per
  class and combination of fields; assigning a field moves the instance to the shared set
  that also has that field, so ``model_fields_set`` stays exact;
- the field names: the values sit in a dict whose keys are shared with the other instances
  of the class (``_dicts.shared_keys``), 96-160 B instead of 184-272 B.

The engine makes a few of these on every step from values it knows are valid (a next step of
the same task, a worker's output): ``_field_values`` and ``_from_valid`` build such an instance
without running validation, as validation would build it (``tests/test_lean_models.py``
compares the two).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from nbagent._dicts import shared_keys

__all__ = ["LeanModel"]


class _SharedFieldsSet(set[str]):
    """A fields-set shared by many model instances; copied before any instance changes it."""


_FIELDS_SETS: dict[tuple[type, frozenset[str]], _SharedFieldsSet] = {}
_LAYOUTS: dict[type, dict[str, Any]] = {}  # model class -> an empty dict of its fields' shared layout
_set = object.__setattr__
_new = object.__new__


def _shared_set(cls: type, names: frozenset[str]) -> _SharedFieldsSet:
    key = (cls, names)
    shared = _FIELDS_SETS.get(key)
    if shared is None:
        shared = _FIELDS_SETS.setdefault(key, _SharedFieldsSet(names))
    return shared


class LeanModel(BaseModel):
    """A ``BaseModel`` whose instances share their fields-set and their field names.

    Its validator is built when the first instance is made, not at import (``defer_build``,
    inherited): ``import nbagent`` stays light, and every instance after the first costs the same.
    """

    model_config = ConfigDict(defer_build=True)

    def model_post_init(self, __context: Any) -> None:
        # every instance of a model passes here: _shared_set's lookup is inlined
        key = (type(self), frozenset(self.__pydantic_fields_set__))
        shared = _FIELDS_SETS.get(key)
        if shared is None:
            shared = _shared_set(*key)
        _set(self, "__pydantic_fields_set__", shared)
        _set(self, "__dict__", shared_keys(self.__dict__))

    def __setattr__(self, name: str, value: Any) -> None:
        fs = self.__pydantic_fields_set__
        if type(fs) is _SharedFieldsSet and name not in fs:
            if name in type(self).model_fields:
                # pydantic adds the name to the fields-set: take the shared set that has it
                # already (its add is then a no-op), not a private copy
                fs = _shared_set(type(self), frozenset(fs) | {name})
            else:
                fs = set(fs)
            object.__setattr__(self, "__pydantic_fields_set__", fs)
        super().__setattr__(name, value)

    @classmethod
    def _field_values(cls) -> dict[str, Any]:
        """A dict of this model's fields (values None) sharing its instances' key layout: set
        every field, in declaration order, then hand it to ``_from_valid``."""
        layout = _LAYOUTS.get(cls)
        if layout is None:
            if (
                cls.__private_attributes__
                or cls.model_post_init is not LeanModel.model_post_init
                or cls.model_config.get("extra") == "allow"
            ):
                raise TypeError(f"{cls.__name__} has private attributes, extra fields or a post-init of its own")
            layout = _LAYOUTS.setdefault(cls, shared_keys(dict.fromkeys(cls.model_fields)))
        return layout.copy()

    @classmethod
    def _from_valid(cls, values: dict[str, Any], given: frozenset[str]) -> Any:
        """The instance validation would make of ``values`` (every field, from
        ``_field_values``), ``given`` being the fields the caller named: for values the
        caller knows validation takes as they are (the engine's own, of the very types the
        fields hold). Not for input from outside: nothing is checked."""
        shared = _FIELDS_SETS.get((cls, given))
        if shared is None:
            shared = _shared_set(cls, given)
        self = _new(cls)
        _set(self, "__dict__", values)
        _set(self, "__pydantic_fields_set__", shared)
        _set(self, "__pydantic_extra__", None)
        _set(self, "__pydantic_private__", None)
        return self
