"""Damaged runs: one clear error naming the file, the run or task and what is damaged; and
what a load that skipped damaged tasks tells the runner it returns.

Why: a run store or run file can be damaged (a disk that lost pages, a file cut short, another
tool that rewrote a row). Reading one must never end in a raw ``sqlite3``, JSON or
``AttributeError`` traceback. What can be told apart is: damage to one task (its row, its
records, an object only it refers to) skips that task and loads the others, with a
``DamagedRunWarning`` listing what was skipped; damage whose reach cannot be told (a log row
that cannot be read, damaged database pages, a missing table) refuses the run, or the store.

A runner that was loaded without some damaged tasks knows it (``skipped_tasks(runner)``, also
``runner.skipped_tasks``), and saving it never writes over what it skipped: into the store it
came from it goes as a new run; over the run file it came from it is refused.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent.allowlist import PersistError

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = [
    "DamagedRunError", "DamagedRunWarning", "SkippedTasks", "skipped_tasks", "is_damage", "one_line", "SQLITE_ERRORS",
]

# what a sqlite3 call on a damaged file can raise: its errors, and UnicodeDecodeError when the
# message SQLite gives names damaged bytes ("malformed database schema (...)")
SQLITE_ERRORS = (sqlite3.Error, UnicodeDecodeError)


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line (a report's error must not spill over several), cut to ``limit``."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class DamagedRunError(PersistError):
    """A saved run cannot be read as it was written: names the file (``path``), the run
    (``run``, for a store) and the task (``task``) when the damage is theirs, and what is
    damaged (``what``)."""

    def __init__(self, path: Any, what: str, *, run: str | None = None, task: str | None = None) -> None:
        self.path = str(path)
        self.run = run
        self.task = task
        self.what = one_line(what)
        where = self.path
        if run is not None:
            where += f" (run {run})"
        if task is not None:
            where += f": task {task}"
        super().__init__(f"{where}: {self.what}")


class DamagedRunWarning(UserWarning):
    """Some tasks of a run were damaged: the others were loaded, these were skipped."""


def is_damage(err: BaseException) -> bool:
    """Whether a ``sqlite3`` error says the file's content is damaged (not busy, not full)."""
    if isinstance(err, UnicodeDecodeError):
        return True
    if not isinstance(err, sqlite3.DatabaseError):
        return False
    name = getattr(err, "sqlite_errorname", "")
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CORRUPT_INDEX", "SQLITE_CORRUPT_SEQUENCE",
                "SQLITE_CORRUPT_VTAB"):
        return True
    text = str(err).lower()
    return type(err) is sqlite3.DatabaseError or any(
        part in text for part in ("malformed", "not a database", "no such table", "no such column", "could not decode")
    )


def store_error(path: Any, err: BaseException, doing: str, *, run: str | None = None) -> PersistError:
    """The PersistError for a ``sqlite3`` error met while ``doing`` something with a store."""
    if isinstance(err, UnicodeDecodeError):
        what = "SQLite's own tables hold bytes that are not UTF-8"
        return DamagedRunError(path, f"the database is damaged ({what}) while {doing}", run=run)
    if is_damage(err):
        return DamagedRunError(path, f"the database is damaged ({err}) while {doing}", run=run)
    return PersistError(f"{path}: could not finish {doing}: {one_line(str(err))} ({type(err).__name__})")


# ----- what a load skipped ---------------------------------------------------------------------


@dataclass
class SkippedTasks:
    """What the load that built a runner skipped as damaged (kept in ``runner._services``)."""

    source: str = ""  # the file it was loaded from (absolute)
    run: str | None = None  # the run, for a store
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> what was damaged


def mark_skipped(runner: AgentRunner, source: Any, run: str | None, skipped: dict[str, str]) -> None:
    """Tell ``runner`` which tasks of ``source`` (run ``run``) were skipped as damaged."""
    found = runner._services.setdefault(SkippedTasks)
    found.source, found.run, found.tasks = _key(source), run, dict(skipped)


def skipped_tasks(runner: AgentRunner) -> dict[str, str]:
    """The tasks the load that built ``runner`` skipped as damaged: task id -> what was damaged.

    Example:

    >>> import json, pathlib, tempfile, warnings
    >>> from nbagent import ReActAgent, ScriptedLLM
    >>> from nbagent.store import load_runner, save_runner, skipped_tasks
    >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4", "Answer: 6"]))
    >>> _ = agent.chat("2 + 2?"); _ = agent.chat("3 + 3?")
    >>> path = save_runner(agent, pathlib.Path(tempfile.mkdtemp()) / "run.json")
    >>> doc = json.loads(path.read_text())
    >>> doc["tasks"][1]["steps"] = "damaged"
    >>> _ = path.write_text(json.dumps(doc))
    >>> with warnings.catch_warnings():  # load_runner warns that it skipped a task; quiet here
    ...     warnings.simplefilter("ignore")
    ...     loaded = load_runner(path)
    >>> list(skipped_tasks(loaded).values()), len(loaded.list_tasks())
    (['steps should be list, got str'], 1)
    """
    found = runner._services.get(SkippedTasks)
    return {} if found is None else dict(found.tasks)


def skips_from(runner: AgentRunner, path: Any, run: str | None = None) -> bool:
    """Whether ``runner`` was loaded from ``path`` (and run ``run``) without some damaged tasks."""
    found = runner._services.get(SkippedTasks)
    return found is not None and bool(found.tasks) and found.source == _key(path) and (run is None or found.run == run)


def refuse_overwrite(runner: AgentRunner, path: Any) -> None:
    """Saving over the run file ``runner`` was loaded from without its damaged tasks would
    lose them: refused, naming them."""
    if skips_from(runner, path):
        names = ", ".join(sorted(skipped_tasks(runner)))
        raise PersistError(
            f"{path}: this runner was loaded from it without its damaged task(s) {names}; saving over it "
            "would lose them: save to another file"
        )


def _key(path: Any) -> str:
    try:
        return str(Path(os.fspath(path)).absolute())
    except TypeError:
        return str(path)
