"""Files that readers never see half-written, and a lock file one process holds."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO

from schemas.errors import InferbusError


class AlreadyRunning(InferbusError):
    """Another process holds the lock file: the command it runs must not run twice here."""

    def __init__(self, message: str, *, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


def output_problem(path: Path) -> str | None:
    """Why a file could not be written at `path` (a folder there, a file above it, a folder
    this user may not write), found before a long run rather than after it; None if it can."""
    if path.is_dir():
        return "is a folder; name a file to write"
    if path.exists() and not os.access(path, os.W_OK):
        return "is not writable"
    nearest = next((p for p in path.parents if p.exists()), None)
    if nearest is not None and not nearest.is_dir():
        return f"{nearest} is a file, not a folder"
    if nearest is not None and not os.access(nearest, os.W_OK):
        return f"{nearest} is not writable"
    return None


def write_atomic(path: Path, data: bytes) -> None:
    """Write beside the target under a dot-name, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def hold_lock(path: Path) -> IO[str]:
    """Take `path`'s exclusive lock for as long as the returned file stays open, and write
    this process's pid in it. The lock goes with the process however it ends (SIGKILL
    too): a stale file never blocks. Raises AlreadyRunning naming the holder's pid."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        text = handle.read().strip()
        handle.close()
        pid = int(text) if text.isdigit() else None
        raise AlreadyRunning(f"{path} is held by pid {pid or 'unknown'}", pid=pid) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle
