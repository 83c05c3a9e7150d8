"""The shareable run file: a runner's whole state as one versioned JSON file.

``save_runner`` writes ``nbagent.store.codec.runner_to_dict`` atomically (a temporary file,
then a rename); ``load_runner`` reads and checks it and rebuilds the runner. A save rewrites
the whole file: about 0.1 s and 2 MB for a 1,000-step ReAct task.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nbagent._files import atomic_write_text
from nbagent.store.codec import check_header, runner_from_dict, runner_to_dict
from nbagent.store.damage import DamagedRunError, refuse_overwrite
from nbagent.allowlist import PersistError
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["save_runner", "load_runner", "read_run_file", "parse_run_text", "atomic_write_text"]

R = TypeVar("R", bound="AgentRunner")


def save_runner(runner: AgentRunner, path: str | os.PathLike[str]) -> Path:
    """Write the runner's state to ``path`` as JSON, atomically. Returns the path.

    Refused over the file the runner was loaded from without some damaged tasks (they would
    be lost)."""
    refuse_overwrite(runner, path)
    doc = runner_to_dict(runner)
    # ASCII with \u escapes: any Python str survives, lone surrogates included
    text = json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return atomic_write_text(path, text)


def read_run_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a run file's JSON, format and version (not yet its contents)."""
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PersistError(f"{source}: no such run file") from None
    except UnicodeDecodeError as err:
        raise DamagedRunError(source, f"not a run file: not UTF-8 text (byte {err.start}: {err.reason})") from err
    return parse_run_text(text, source)


def parse_run_text(text: str, source: str = "run data") -> dict[str, Any]:
    """Parse a run file's text and check its format and version.

    Example:

    >>> import json
    >>> from nbagent import ReActAgent, ScriptedLLM
    >>> from nbagent.store import parse_run_text, runner_to_dict
    >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
    >>> _ = agent.chat("2 + 2?")
    >>> text = json.dumps(runner_to_dict(agent))  # what a run file holds
    >>> parse_run_text(text)["format"]
    'nbagent-run'
    >>> parse_run_text(text[:40], source="cut.json")
    Traceback (most recent call last):
    ...
    nbagent...DamagedRunError: cut.json: ...
    """
    if not text.strip():
        raise DamagedRunError(source, "the file is empty (an interrupted write from another tool?)")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise DamagedRunError(
            source,
            f"not valid JSON at line {err.lineno} column {err.colno} ({err.msg}); the file is truncated or corrupt",
        ) from err
    except RecursionError:
        raise DamagedRunError(
            source,
            f"the JSON is nested too deeply to read (more than about {sys.getrecursionlimit()} levels); "
            "nbagent never writes such a file",
        ) from None
    except ValueError as err:  # a number too long to read, say
        raise DamagedRunError(source, f"not valid JSON ({err})") from err
    return check_header(doc, source)


def load_runner(
    path: str | os.PathLike[str],
    agent_worker: BaseAgentWorker | None = None,
    *,
    runner_cls: type[R] | None = None,
    restore_ids: bool = True,
    **runner_kwargs: Any,
) -> R:
    """Rebuild a runner from a run file (see ``AgentRunner.load``)."""
    source = os.fspath(path)
    doc = read_run_file(source)
    try:
        return runner_from_dict(
            doc, agent_worker, runner_cls=runner_cls, restore_ids=restore_ids, source=source, path=source,
            **runner_kwargs,
        )
    except RecursionError:
        raise DamagedRunError(source, "a value in the file is nested too deeply to rebuild") from None
