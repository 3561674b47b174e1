"""--verify's checks of a GGUF beyond what its header walk refuses: where each tensor's
data lies (llama.cpp loads a file only where every data offset is a multiple of
general.alignment and no two tensors share a byte), and the HC sites its metadata's
block_count implies. Each check gives (code, message, 0) for a problem, at most `cap` per
code, then (code, "", n) for the n more it does not word; verify.py makes them findings.
"""

from __future__ import annotations

from typing import Any, Iterator

from hccli.names import dialects as D
from hccli.base.bounded import one_line
from hccli.base.vocab import HcName


def layout(shard: Any, cap: int) -> Iterator[tuple[str, str, int]]:
    """(code, message, how many more it stands for) for one GGUF file's data section."""
    h = shard.header
    align = h.kv.get("general.alignment", 32)  # a power of two: the header walk refuses any other
    file = one_line(str(shard.path))
    misaligned = [t for t in h.tensors if t.begin % align]
    for t in misaligned[:cap]:
        yield ("gguf_misaligned", f"{file}: tensor '{one_line(t.name, 80)}' starts at data offset {t.begin:,}, "
               f"not a multiple of general.alignment {align}; llama.cpp refuses the file", 0)
    if len(misaligned) > cap:
        yield "gguf_misaligned", "", len(misaligned) - cap
    shared, last = 0, None  # tensors are in the order of their data; `last` ends furthest so far
    for t in h.tensors:
        if t.end == t.begin:
            continue
        if last is not None and t.begin < last.end:
            shared += 1
            if shared <= cap:
                yield ("gguf_overlap", f"{file}: tensors '{one_line(last.name, 80)}' and '{one_line(t.name, 80)}' "
                       f"share data bytes {t.begin:,} to {min(t.end, last.end):,}; llama.cpp refuses the file", 0)
        if last is None or t.end > last.end:
            last = t
    if shared > cap:
        yield "gguf_overlap", "", shared - cap


def missing_sites(sites: list, n_layers: int, arch: str) -> Iterator[tuple[str, str, int]]:
    """hc_missing_site for each site the metadata's block_count implies and the file lacks: every
    block holds an attn and an ffn site, and deepseek4 a head mix (deepseek41 has none). block_count
    is within the bound on layers (checkpoint/gguf/settings.py), so these are at most two a layer."""
    have = {(x.layer, x.site) for x in sites}
    want = [(layer, site) for layer in range(n_layers) for site in ("attn", "ffn")]
    if arch == "deepseek4":
        want.append((n_layers, "head"))
    for layer, site in want:
        if (layer, site) not in have:
            owner = HcName("", None, "head", "fn") if site == "head" else HcName("layers", layer, site, "fn")
            yield ("hc_missing_site", f"no {D.spell_hc(owner, D.GGUF) or ''} (nor its base and scale); the "
                   f"metadata's block_count {n_layers} implies it", 0)
