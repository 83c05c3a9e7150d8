"""Saving and loading runs: no pickle, nothing is ever eval'd.

One module per concept:

- ``values``: values <-> tagged JSON (the encoder/decoder, ``allow_type``, ``PersistError``);
- ``codec``: a runner and its tasks <-> JSON-able records (the fields of a run, in one place);
- ``jsonfile``: the shareable ``run.json`` file (``save_runner`` / ``load_runner``);
- ``autosave``: saving after every step and state change.

``nbagent.persist`` re-exports the names it always had.
"""

from __future__ import annotations

from nbagent.store.autosave import AutosaveWarning, autosave_path, set_autosave
from nbagent.store.codec import (
    FORMAT,
    VERSION,
    SavedWorker,
    check_header,
    runner_from_dict,
    runner_to_dict,
)
from nbagent.store.jsonfile import atomic_write_text, load_runner, parse_run_text, read_run_file, save_runner
from nbagent.store.values import PersistError, allow_type

__all__ = [
    "FORMAT",
    "VERSION",
    "PersistError",
    "SavedWorker",
    "allow_type",
    "save_runner",
    "load_runner",
    "runner_to_dict",
    "runner_from_dict",
    "read_run_file",
    "parse_run_text",
    "check_header",
    "atomic_write_text",
    "set_autosave",
    "autosave_path",
    "AutosaveWarning",
]
