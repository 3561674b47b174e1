"""Second spellings: names that spell a tensor an earlier name of the checkpoint already spells
(a number with a leading zero or in another script's digits, or a dialect's own alias), which
verify reports as duplicate_spelling and diff refuses to compare."""

from __future__ import annotations

import re
from collections.abc import Sequence

from hccli.names.dialects import GGUF, MEGATRON, RELEASE, RELEASE_ROOTS, UNKNOWN, canonical_name

# A dot-led segment of decimal digits that vocab.NUMBER refuses: a leading zero, or a digit of
# another script (fullwidth, Arabic-Indic, ...) anywhere in it. int() reads both as a number.
_ODD_NUMBER = re.compile(r"(?<=\.)(?:0\d{1,63}|[0-9]{0,63}(?![0-9])\d\d{0,63})(?![^.])")
_ASCII_ODD = re.compile(r"\.0[0-9]")  # what an ASCII name needs for one: the quick test over all names


# Where no number is odd, the names of these dialects that may spell what another name spells: one
# that looks canonical (an unmapped name is its own key) or a layer prefix the producer never writes
# (_LAYER takes blk and layers alike). Their other names map one to one (injective tables).
_CANONICAL_ROOTS = (*RELEASE_ROOTS, "head.")
_ALIAS_ROOTS = {GGUF: _CANONICAL_ROOTS, MEGATRON: (*_CANONICAL_ROOTS, "decoder.blk.")}


def _as_number(m: re.Match) -> str:
    return str(int(m[0]))


def second_spellings(names: Sequence[str], dialect: str) -> list[tuple[str, str, str]]:
    """(first name, second name, the canonical name both spell) for each name that spells a tensor
    an earlier name already spells: a number with a leading zero or in other digits
    (`layers.01.hc_attn_fn`, `layers.１.hc_attn_fn`, `blk.01.…`), or the dialect's own aliases
    (an optional `model.` prefix). The canonical patterns map such a number to nothing, yet a
    loader may take either name for the tensor: the checkpoint says two things at once."""
    joined = "\n".join(names)  # C-level scans of all names at once decide the usual case (a GGUF may hold 1M)
    odd = set() if joined.isascii() and _ASCII_ODD.search(joined) is None else {
        n for n in names if not n.isascii() or _ASCII_ODD.search(n)}
    own = dialect in (RELEASE, UNKNOWN)
    roots = _ALIAS_ROOTS.get(dialect)
    if not odd and (own or (roots is not None and not joined.startswith(roots)
                            and not any(f"\n{r}" in joined for r in roots))):
        return []  # each name maps to a key of its own
    del joined
    first: dict[str, str] = {}
    out: list[tuple[str, str, str]] = []
    for n in names:
        spelt = _ODD_NUMBER.sub(_as_number, n) if n in odd else n
        key = spelt if own else (canonical_name(spelt, dialect) or spelt)
        seen = first.setdefault(key, n)
        if seen != n:
            out.append((seen, n, key))
    return out
