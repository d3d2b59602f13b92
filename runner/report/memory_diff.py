"""Which allocation sites account for the difference in memory peak between two runs.

`python -m runner.compare --memory BEFORE AFTER` reads the table each run logged with `measure.memory_snapshot`
(the allocations live at its window's peak, by site): they sum to the peak, so the changes sum to its change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner import names

_UNITS = ("B", "KiB", "MiB", "GiB")


def readable_bytes(count: float) -> str:
    """A byte count in the largest unit that keeps it at 1 or more, signed when negative."""
    size, unit = abs(count), 0
    while size >= 1024 and unit < len(_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    sign = "-" if count < 0 else ""
    return f"{sign}{size:.0f} B" if unit == 0 else f"{sign}{size:.2f} {_UNITS[unit]}"


def signed_bytes(count: float) -> str:
    """A change in bytes, readable, with its sign (+ for more)."""
    return ("+" if count > 0 else "") + readable_bytes(count)


def sites_of(table: dict[str, Any]) -> dict[str, int]:
    """Site -> bytes live at the peak, from the logged table ({"columns": [...], "data": [...]})."""
    site, size = table["columns"].index(names.MEMORY_SITE), table["columns"].index(names.MEMORY_SITE_BYTES)
    return {row[site]: int(row[size]) for row in table["data"]}


@dataclass(frozen=True)
class SiteChange:
    """One allocation site's bytes live at each run's peak."""

    site: str
    before: int
    after: int

    @property
    def change(self) -> int:
        """Bytes more at the later run's peak (negative: fewer)."""
        return self.after - self.before


def site_changes(before: dict[str, int], after: dict[str, int]) -> list[SiteChange]:
    """Every site of either peak, the largest change first; a site absent from a peak holds 0 there."""
    changes = [SiteChange(site, before.get(site, 0), after.get(site, 0)) for site in before.keys() | after.keys()]
    return sorted(changes, key=lambda c: (-abs(c.change), c.site))


def change_rows(changes: list[SiteChange]) -> list[dict[str, str]]:
    """The changes as table rows, each with its share of the total change."""
    total = sum(c.change for c in changes)
    return [
        {
            "site": c.site,
            "before": readable_bytes(c.before),
            "after": readable_bytes(c.after),
            "change": signed_bytes(c.change),
            "share of change": f"{c.change / total:.1%}" if total else "-",
        }
        for c in changes
    ]
