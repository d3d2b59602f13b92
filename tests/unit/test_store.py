"""The store's check before use: a SQLite file with a damaged page is refused, wherever in the file the damage is."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from runner.config import ConfigError
from runner.tracking.store import check_intact


def test_a_damaged_page_behind_an_intact_header_is_refused(tracking_uri: str) -> None:
    """A bad block in the middle of the file: SQLite opens it and reads its schema; only reading every page finds it."""
    store = Path(tracking_uri.removeprefix("sqlite:///"))
    with closing(sqlite3.connect(store)) as db:
        ((page_size,),) = db.execute("PRAGMA page_size").fetchall()
        ((runs_page,),) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchall()
    check_intact(tracking_uri)  # the migrated store as it is: passed
    with store.open("r+b") as file:  # the runs table's first page overwritten; page 1, the header, untouched
        file.seek((runs_page - 1) * page_size)
        file.write(b"\xff" * page_size)
    with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        assert db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 1  # its header and schema still read
    damaged = f"tracking.uri={tracking_uri}: the store {store} is damaged ("
    with pytest.raises(ConfigError, match=f"^{re.escape(damaged)}.*Page {runs_page}: ") as refused:
        check_intact(tracking_uri)
    assert str(refused.value).endswith("restore it from a backup, or move it aside to start a new store")
