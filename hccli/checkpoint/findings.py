"""What --verify reports: the stable codes (and their severity and meaning, which the README
lists) and the Finding each check returns."""

from __future__ import annotations

from dataclasses import dataclass

from hccli.bounded import one_line

# code -> (severity, what it means); the README lists them
CODES = {
    "unreadable_shard": ("error", "a shard's header could not be read"),
    "missing_shard": ("error", "the index (or the other shards' -of-N names) names a shard file that is not there"),
    "partial_file": ("error", "a .partial file beside the shards: an interrupted download or write"),
    "unsafe_shard_path": ("error", "the index names a shard outside the checkpoint (absolute path or ..)"),
    "index_missing_tensor": ("error", "the index lists a tensor that its shard does not hold"),
    "unindexed_tensor": ("error", "a shard holds a tensor the index does not list"),
    "wrong_shard": ("error", "a tensor lies in another shard than the index says"),
    "duplicate_tensor": ("error", "a tensor is stored in several shards"),
    "unindexed_shard": ("warning", "a .safetensors file in the directory that the index never names"),
    "total_size_mismatch": ("error", "metadata.total_size differs from the sum of the tensors' byte spans"),
    "no_index": ("warning", "a directory of shards without model.safetensors.index.json"),
    "hc_incomplete": ("error", "a site lacks one of its hc_*_fn, hc_*_base, hc_*_scale"),
    "hc_shape": ("error", "HC tensors whose shapes disagree with each other or with hc_mult"),
    "hc_dtype": ("error", "an HC tensor that is not F32"),
    "hc_quantised": ("error", "a GGUF HC tensor stored in a quantised GGML type (Q8_0, Q4_K, ...), named"),
    "hc_reduced_precision": ("warning", "a GGUF HC tensor stored in F16 or BF16: each value rounded to 2^-11 "
                                        "or 2^-8 relative"),
    "hc_missing_site": ("error", "a GGUF lacks an HC site its metadata's block_count implies"),
    "hc_nonfinite": ("error", "an HC tensor holds NaN or Inf"),
    "hc_unchecked": ("warning", "an hc_*_fn whose values were not read: past the bytes verify reads in one run"),
    "config_unreadable": ("warning", "config.json beside the checkpoint could not be used"),
    "missing_tensor": ("error", "the config implies a tensor the checkpoint lacks"),
    "unexpected_tensor": ("error", "the checkpoint holds a tensor the config does not imply"),
    "wrong_shape": ("error", "a tensor's shape differs from what the config implies"),
    "wrong_dtype": ("error", "a tensor's dtype differs from what the config implies"),
    "partial_inventory": ("warning", "a GGUF holds only some of the tensors the config implies (said once)"),
    "unmapped_tensor": ("warning", "a tensor name the checkpoint's dialect does not define"),
    "shard_placement": ("info", "a known release's tensors lie in other shards, or its shards differ in size, "
                                "from the published files"),
}


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: str
    message: str


def finding(code: str, message: str) -> Finding:
    """A finding of a known code at its severity, its message held to one line."""
    return Finding(code, CODES[code][0], one_line(message, 400))
