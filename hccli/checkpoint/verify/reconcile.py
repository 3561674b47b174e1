"""The config's inventory as a derived layout stores it, by canonical name.

There is one inventory (model/inventory.py, the release's tensors). A derived layout is
that inventory under its producer's rules, not a second list:

- transformers save_pretrained (docs/DIALECTS.md): no DSpark/MTP stages, no
  F8_E8M0 scales, every weight dequantised (an fp4 I8 [o, i/2] is [o, i]) and
  stored in the model dtype, except what `_keep_in_fp32_modules_strict` keeps
  F32 (HC, sinks, ape, norms, router bias) and the I64 hash table.
- GGUF (llama.cpp's converter): no stages, no scales, weights dequantised and
  re-typed at will (no dtype is expected outside HC), routed experts stacked per
  layer into one [E, o, i] tensor (dialects.FUSED_MARK).

Stored names are mapped to canonical ones with dialects.canonical_name; a name
the producer never writes maps to None and is reported as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hccli.model.packing import fp4_unpacked
from hccli.names import dialects as D

# dialects whose every tensor name names/dialects.py maps; the others are reconciled in HC only
RECONCILED = (D.RELEASE, D.RELEASE_PREFIXED, D.TRANSFORMERS_SAVED, D.GGUF)
_EXPERT = re.compile(r"^(layers\.\d+\.ffn\.experts)\.\d+\.(w[123]\.weight)$")
_KEEP_F32 = re.compile(r"(^|\.)hc_|\.attn_sink$|\.ape$|norm\.weight$|\.ffn\.gate\.bias$")


@dataclass(frozen=True, slots=True)
class Expected:
    name: str  # canonical
    shape: tuple[int, ...]  # canonical (row-major) order
    dtype: str | None  # None: any type is the layout's own business
    exact: bool


def _derived(dialect: str) -> bool:
    return dialect in (D.TRANSFORMERS_SAVED, D.GGUF)


def expected_layout(inventory: Any, dialect: str, model_dtype: str | None) -> dict[str, Any]:
    """canonical name -> what the layout holds there, for the tensors of `inventory`."""
    if not _derived(dialect):
        return inventory.by_name()  # the release's own specs (same name, shape, dtype, exact fields)
    out: dict[str, Any] = {}
    fused: dict[str, list] = {}
    for t in inventory.tensors:
        if t.scope == "stage" or t.is_scale:
            continue
        shape = fp4_unpacked(t.shape) if t.fp4_packed else t.shape
        if dialect == D.GGUF:
            m = _EXPERT.match(t.name)
            if m is not None:
                fused.setdefault(f"{m[1]}.{D.FUSED_MARK}.{m[2]}", []).append((shape, t.exact))
                continue
            out[t.name] = Expected(t.name, shape, None, t.exact)  # HC types: verify's hc_* findings
            continue
        dtype = "F32" if _KEEP_F32.search(t.name) else t.dtype if t.dtype in ("F32", "I64") else model_dtype
        out[t.name] = Expected(t.name, shape, dtype, t.exact)
    for name, items in fused.items():
        out[name] = Expected(name, (len(items), *items[0][0]), None, all(e for _, e in items))
    return out


def canonical_tensors(tensors: dict[str, Any], dialect: str) -> tuple[dict[str, Any], list[str]]:
    """(canonical name -> the stored entry, stored names the dialect does not define)."""
    if dialect == D.RELEASE:
        return tensors, []
    out: dict[str, Any] = {}
    unmapped: list[str] = []
    for name, ref in tensors.items():
        canon = D.canonical_name(name, dialect)
        if canon is None:
            unmapped.append(name)
        else:
            out[canon] = ref
    return out, unmapped


def model_dtype(tensors: dict[str, Any], dialect: str) -> str | None:
    """The dtype a transformers save stores its weights in: its embedding's."""
    ref = tensors.get("model.embed_tokens.weight") if dialect == D.TRANSFORMERS_SAVED else None
    return ref[1].dtype if ref is not None else None
