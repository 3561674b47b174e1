"""Counts and sizes in words: the one spelling of "1 shard", "3 shards" and "974 KB".

Every renderer and every core message that puts a count before a noun, or a byte size into
prose, goes through here, so that "1 shards" and "(0.00 GB)" cannot come back one f-string at
a time. Sizes are decimal (1 KB = 1,000 bytes), as the GB of a checkpoint's published size and
every other size `hc` says.
"""

from __future__ import annotations

# Nouns whose plural is not the noun + "s".
_IRREGULAR = {"entry": "entries", "matrix": "matrices", "repository": "repositories", "index": "indexes",
              "this": "these"}


def plural(n: int, noun: str, many: str | None = None) -> str:
    """`n` with thousands separators and the noun in the number it takes: plural(1, "shard") is
    "1 shard", plural(2, "shard") "2 shards", plural(0, "entry") "0 entries"."""
    return f"{n:,} {noun_for(n, noun, many)}"


def noun_for(n: int, noun: str, many: str | None = None) -> str:
    """The noun alone in the number `n` takes (for a count written elsewhere in the line)."""
    if n == 1:
        return noun
    return many or _IRREGULAR.get(noun) or noun + "s"


_COUNT_UNITS = (("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12))
_UNITS = (("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12))


def _three_digits(v: float) -> str:
    return f"{v:,.{2 if v < 10 else 1 if v < 100 else 0}f}"


def _scaled(n: float, units: tuple[tuple[str, float], ...], sep: str) -> str:
    sign, n = ("-" if n < 0 else ""), abs(n)
    for i, (unit, k) in enumerate(units):
        text = _three_digits(n / k)
        # 999,999 bytes round to "1,000 KB" and 9,995 to "10.00 KB": the next unit, or decade, says it
        if float(text.replace(",", "")) < 1000 or i == len(units) - 1:
            return f"{sign}{_three_digits(float(text.replace(',', '')))}{sep}{unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def short(n: int | float) -> str:
    """A large count with three significant digits and an SI letter: "974", "1.17 M", "284 G"
    (beside the exact count, never instead of it)."""
    return f"{n:,.0f}" if abs(n) < 1e3 else _scaled(float(n), _COUNT_UNITS, " ")


def size(nbytes: int | float) -> str:
    """A byte count in the unit that reads best, with three significant digits (never "0.00 GB"):
    "1 byte", "512 bytes", "9.74 KB", "974 KB", "1.17 MB", "510 GB", "1,600 TB"."""
    if abs(nbytes) < 1e3:
        return plural(int(nbytes), "byte")
    return _scaled(float(nbytes), _UNITS, " ")


def close_names(given: str, candidates, n: int = 3) -> list[str]:
    """Up to n of the candidates closest to what was given (difflib's ratio, 0.6 and up), for an
    empty selection's "close names: ..."; [] when none is close."""
    import difflib  # only when a selection came up empty

    return difflib.get_close_matches(given, list(dict.fromkeys(candidates)), n=n)


def listed(items, n: int = 3, quote: bool = True) -> str:
    """Up to n items, quoted, and how many more: "'a', 'b', 'c' and 4 more"."""
    items = list(items)
    shown = ", ".join(repr(i) if quote else str(i) for i in items[:n])
    return shown + (f" and {len(items) - n:,} more" if len(items) > n else "")
