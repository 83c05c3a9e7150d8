"""Save and load a runner's whole state as versioned JSON (moved to ``nbagent.store``).

This module re-exports the names it always had, so ``from nbagent.persist import ...`` keeps
working: the value codec is ``nbagent.store.encoder``/``decoder``, the run records ``nbagent.store.codec``,
the JSON file ``nbagent.store.jsonfile`` and autosave ``nbagent.store.autosave``.
"""

from __future__ import annotations

from nbagent.store import (
    FORMAT,
    VERSION,
    AutosaveWarning,
    DamagedRunError,
    DamagedRunWarning,
    PersistError,
    SavedWorker,
    allow_type,
    atomic_write_text,
    autosave_path,
    check_header,
    load_runner,
    parse_run_text,
    read_run_file,
    runner_from_dict,
    runner_to_dict,
    save_runner,
    set_autosave,
)
from nbagent.allowlist import _ALLOWED  # noqa: F401 - the registry allow_type fills

__all__ = [
    "FORMAT",
    "VERSION",
    "PersistError",
    "DamagedRunError",
    "DamagedRunWarning",
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
