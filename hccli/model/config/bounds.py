"""Scalar config keys: their reference defaults and the bounds `hc` holds them to.

The bounds are far above every published model (V4-Pro: 61 layers, dim 7168,
384 experts, hc 4) and far below what would make `hc` build gigabytes from a
1 KB file. They are checked before anything is built from the config.
"""

from __future__ import annotations

from hccli.base.vocab import (  # noqa: F401 - the stream and iteration bounds are the vocabulary's
    DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_NORM_EPS, DEFAULT_SINKHORN_ITERS, MAX_HC_MULT, MAX_SINKHORN_ITERS)

MAX_LAYERS = 1024  # backbone layers, and vision layers
MAX_STAGES = 16  # DSpark / MTP stages after the backbone
MAX_DIM = 2**20  # any width: hidden, expert, head, rank, window
MAX_COUNT = 2**16  # heads, experts, groups, ratios, blocks
MAX_VOCAB = 2**24
MAX_ENGRAM_ROWS = 2**32  # rows of one Engram table (V4.1-Flash: 384 M)
# (layers + stages) x routed experts: the inventory holds ~6 tensors per expert and layer,
# so this keeps it under ~1 M tensors (V4-Pro: 62 x 384 = 23,808)
MAX_LAYER_EXPERTS = 2**17

# key: (minimum, maximum, what the maximum bounds, reference default or None when required)
SCALARS: dict[str, tuple[int, int, str, int | None]] = {
    "n_layers": (1, MAX_LAYERS, "hc's bound on layers", None),
    "vocab_size": (1, MAX_VOCAB, "hc's bound on a vocabulary", None),
    "dim": (1, MAX_DIM, "hc's bound on a width", None),
    "n_heads": (1, MAX_COUNT, "hc's bound on heads", None),
    "q_lora_rank": (1, MAX_DIM, "hc's bound on a width", None),
    "moe_inter_dim": (1, MAX_DIM, "hc's bound on a width", None),
    "n_routed_experts": (1, MAX_COUNT, "hc's bound on experts", None),
    "n_activated_experts": (1, MAX_COUNT, "hc's bound on experts", None),
    "hc_mult": (1, MAX_HC_MULT, "hc's bound on residual streams", DEFAULT_HC_MULT),
    "hc_sinkhorn_iters": (1, MAX_SINKHORN_ITERS, "hc's bound on Sinkhorn iterations", DEFAULT_SINKHORN_ITERS),
    "n_mtp_layers": (0, MAX_STAGES, "hc's bound on stages", 1),
    "n_hash_layers": (0, MAX_LAYERS, "hc's bound on layers", 0),
    "n_shared_experts": (0, MAX_COUNT, "hc's bound on experts", 1),
    "o_groups": (1, MAX_COUNT, "hc's bound on groups", 8),
    "o_lora_rank": (1, MAX_DIM, "hc's bound on a width", 1024),
    "head_dim": (1, MAX_DIM, "hc's bound on a width", 512),
    "rope_head_dim": (0, MAX_DIM, "hc's bound on a width", 64),
    "index_n_heads": (1, MAX_COUNT, "hc's bound on heads", 64),
    "index_head_dim": (1, MAX_DIM, "hc's bound on a width", 128),
    "window_size": (0, MAX_DIM, "hc's bound on a width", 128),
    "engram_max_ngram_size": (2, MAX_COUNT, "hc's bound on n-grams", 4),
    "engram_n_heads": (1, MAX_COUNT, "hc's bound on heads", 8),
    "engram_head_dim": (1, MAX_DIM, "hc's bound on a width", 256),
    "dspark_markov_rank": (1, MAX_DIM, "hc's bound on a width", 256),
    "dspark_n_routed_experts": (1, MAX_COUNT, "hc's bound on experts", None),
    "vision_n_layers": (1, MAX_LAYERS, "hc's bound on layers", None),
    "vision_dim": (1, MAX_DIM, "hc's bound on a width", None),
    "vision_n_heads": (1, MAX_COUNT, "hc's bound on heads", None),
    "vision_inter_dim": (1, MAX_DIM, "hc's bound on a width", None),
    "vision_patch_size": (1, MAX_COUNT, "hc's bound on a patch", None),
    "vision_downsample_ratio": (1, MAX_COUNT, "hc's bound on a ratio", None),
}

# list entries: (minimum, maximum, what the maximum bounds)
COMPRESS_RATIO = (0, MAX_COUNT, "hc's bound on a compress ratio")
ENGRAM_ROWS = (1, MAX_ENGRAM_ROWS, "hc's bound on an Engram table")
BLOCK = (1, MAX_COUNT, "hc's bound on a quantisation block")

# floats: (minimum, maximum, reference default)
FLOATS = {
    "hc_eps": (0.0, 1.0, DEFAULT_HC_EPS),
    "norm_eps": (0.0, 1.0, DEFAULT_NORM_EPS),
}

DEFAULT_EXPERT_DTYPE = "fp4"
# read only when present: the vision encoder, and a stage expert count other than the backbone's
OPTIONAL = tuple(k for k in SCALARS if k.startswith("vision_")) + ("dspark_n_routed_experts",)
REQUIRED = tuple(k for k, (_, _, _, default) in SCALARS.items() if default is None and k not in OPTIONAL)
