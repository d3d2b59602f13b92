"""Files written whole or not at all, for files that other processes read while they change."""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, content: str | bytes) -> None:
    """Write `content` through a rename: a reader sees the old file or the new one; a full disk leaves no draft."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(content, bytes):
            draft.write_bytes(content)
        else:
            draft.write_text(content)
        draft.replace(path)
    except OSError:
        draft.unlink(missing_ok=True)
        raise
