"""Writing files safely: a temporary file and a rename, so a crash never leaves half a file."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

__all__ = ["atomic_write_text"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's), or cannot tell: keep its file
    return True


def _remove_stale_temps(directory: Path, name: str) -> None:
    """Delete the temporary files a killed save of ``name`` left behind: those whose writing
    process is gone (the pid is in the name; an old-style name without one, after an hour)."""
    prefix = f".{name}."
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp")):
            continue
        middle = entry.name[len(prefix) : -len(".tmp")]
        pid_text = middle.split(".", 1)[0]
        try:
            if pid_text.isdigit() and "." in middle:
                stale = not _pid_alive(int(pid_text))
            else:
                stale = time.time() - entry.stat().st_mtime > 3600
            if stale:
                os.unlink(entry.path)
        except OSError:
            continue


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half a file.

    Example:

    >>> import pathlib, tempfile
    >>> from nbagent.store import atomic_write_text
    >>> path = atomic_write_text(pathlib.Path(tempfile.mkdtemp()) / "notes.txt", "all or nothing")
    >>> path.read_text()
    'all or nothing'
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    directory = target.parent if str(target.parent) else Path(".")
    _remove_stale_temps(directory, target.name)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; give it the usual mode
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target
