"""Rich renderables for `hc cache` (built here, printed by output.show)."""

from __future__ import annotations

from typing import Any, Iterator

from rich.table import Table
from rich.text import Text

from hccli.checkpoint.remote.cache import MAX_CACHE_ENTRIES, CacheCleared, CacheListing
from hccli.base.words import plural, size
from hccli.cli.output import plain, safe


def _left_alone(names: tuple[str, ...], root: str) -> Iterator[Any]:
    if names:
        shown = ", ".join(plain(n) for n in names[:5]) + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")
        yield Text(f"left alone in {plain(root)}, not made by hc: {shown}")


def _truncated(truncated: bool) -> Iterator[Any]:
    if truncated:
        yield Text(f"note: stopped counting after {MAX_CACHE_ENTRIES:,} entries; the figures are a lower bound")


def listing(c: CacheListing) -> list[Any]:
    out: list[Any] = []
    if c.files:
        t = Table(show_edge=False, title=f"Cache {safe(c.root)}", title_justify="left")
        for col in ("repository", "revision", "commit", "file", "entries", "bytes"):
            t.add_column(col, justify="right" if col in ("entries", "bytes") else "left")
        for f in c.files:
            t.add_row(safe(f.repo), safe(", ".join(f.revisions)), f.commit[:12],
                      safe(f.file) if f.file else "(file listing)", f"{f.entries:,}", f"{f.bytes:,}")
        out.append(t)
    if c.unrecognised_entries:
        out.append(Text(f"{plural(c.unrecognised_entries, 'entry')} not recognised (damaged or unfinished): "
                        f"{_bytes(c.unrecognised_bytes)}"))
    out.append(Text(f"total: {plural(c.entries, 'entry')}, {_bytes(c.bytes)} in {plain(c.root)}" if c.entries else
                    f"the cache {plain(c.root)} holds no entries"))
    return [*out, *_left_alone(c.left_alone, c.root), *_truncated(c.truncated)]


def _bytes(n: int) -> str:
    """The exact count (what `--json` says, and `du -b`), and in the unit that reads best."""
    return f"{n:,} bytes ({size(n)})" if n >= 1000 else plural(n, "byte")


def cleared(c: CacheCleared, repo: str | None) -> list[Any]:
    out: list[Any] = []
    verb = "would remove" if c.dry_run else "removed"
    for r in c.removed:
        names = ", ".join(plain(n) for n in r.repos) or "entries of no readable repository"
        out.append(Text(f"{verb} {names}: {plural(r.entries, 'entry')}, {_bytes(r.bytes)} "
                        f"({plain(c.root)}/{r.folder})"))
    if c.removed:
        out.append(Text(f"{verb} {plural(c.entries, 'entry')}, {_bytes(c.bytes)} in all"))
    else:
        what = f"no entries of {plain(repo)}" if repo else "no entries"
        out.append(Text(f"nothing to remove: {what} in {plain(c.root)}"))
    return [*out, *_left_alone(c.left_alone, c.root), *_truncated(c.truncated)]
