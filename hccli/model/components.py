"""The count-params component (inventory.COMPONENTS) of a canonical tensor name, from the name
alone: what `diff` and `inspect` file a checkpoint's tensors under, config or none.

A quantisation side tensor a producer adds (mlx-lm's `.biases`, compressed-tensors'
`.weight_shape`, ...) is named by dialects.canonical_name after the weight it belongs to, so it
lands in that weight's component."""

from __future__ import annotations

from hccli.base.vocab import parse_hc_name

_MARKS = ((".engram.", "engram"), (".attn.indexer.", "indexer"), (".attn.compressor.", "compressor"),
          (".attn.", "attention"), (".ffn.gate.", "router"), (".ffn.experts.", "routed_experts"),
          (".ffn.shared_experts.", "shared_expert"))


def component_of(name: str) -> str:
    """The component of a canonical tensor name; "other" for a name the release has no place for."""
    if name.startswith("mtp."):
        return "dspark"
    if name.startswith(("vision.", "aligner.", "image_")):
        return "vision"
    if parse_hc_name(name) is not None:
        return "hyper_connections"
    for mark, comp in _MARKS:
        if mark in name:
            return comp
    if name.startswith(("embed.", "head.")):
        return "embeddings_head"
    return "norms" if name.endswith("norm.weight") else "other"
