"""The quantisation block a producer writes into config.json, read into one frozen record.

- mlx-lm: the root key `quantization` (`mlx_lm/utils.py`: `quantize_model` writes
  `{group_size, bits, mode}` and, for a model already partly quantised, one entry per module path;
  `load_model` turns a release's fp8 `quantization_config` into `{32, 8, "mxfp8"}`; `save_config`
  copies it to `quantization_config`). A module not named is quantised as its saved shapes say
  (`infer_quant_config`), not by the default.
- the release's `quantization_config` (quant_method fp8, scale_fmt ue8m0, weight_block_size
  [32, 32]): `load_model` reads it as `{32, 8, "mxfp8"}` ("Power-of-two scales over 32x32 blocks
  are mxfp8"), so an mlx-lm conversion is read with it as with its own block.
- compressed-tensors: `quantization_config` whose `quant_method` is "compressed-tensors"
  (`ModelCompressor.update_config`): `format` and `config_groups`, each with its `weights`
  (`num_bits`, `strategy`, `group_size`, `symmetric`, `type`) and `format`.

Nothing here decides a dialect: the record says which block the config holds (`kind`), and the
reconciliation (checkpoint/verify/producers.py) applies it.
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass

from hccli.model.config.read import ConfigError

MLX = "mlx"
COMPRESSED_TENSORS = "compressed-tensors"
RELEASE_FP8 = "fp8"  # the release's own block, which mlx-lm's load_model reads as mxfp8
MLX_MODES = ("affine", "mxfp4", "mxfp8", "nvfp4")  # mlx.nn.quantize's modes
# per-module entries of mlx-lm's block, and compressed-tensors' config groups: a V4-Pro has ~1,300
# linear modules (experts stacked); each entry is a few dozen bytes of a config read whole
MAX_QUANT_ENTRIES = 65_536
_MAX_BITS = 16
_MAX_GROUP = 1 << 16


@dataclass(frozen=True, slots=True)
class MlxQuant:
    """How mlx-lm packed one module: `bits` per value, one scale per `group_size` values."""

    bits: int
    group_size: int
    mode: str


@dataclass(frozen=True, slots=True)
class CtGroup:
    """One compressed-tensors config group's weights."""

    format: str
    num_bits: int
    strategy: str
    group_size: int | None
    symmetric: bool
    type: str


@dataclass(frozen=True, slots=True)
class QuantBlock:
    kind: str  # MLX | RELEASE_FP8 | COMPRESSED_TENSORS
    default: MlxQuant | None = None  # mlx-lm: the block's own group_size, bits, mode
    per_path: tuple[tuple[str, MlxQuant], ...] = ()  # mlx-lm: module path -> its packing
    format: str = ""  # compressed-tensors: the checkpoint's format
    groups: tuple[CtGroup, ...] = ()  # compressed-tensors


def _fail(source: str, key: str, expected: str, got: Any) -> ConfigError:
    # a ConfigError, in parts: a checkpoint's config.json set aside for it names the key everywhere
    shown = type(got).__name__ if not isinstance(got, (int, str, bool)) or isinstance(got, bool) else repr(got)
    return ConfigError.at(source, key, expected, shown[:60])


def _int(source: str, key: str, v: Any, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
        raise _fail(source, key, f"an integer 1..{hi:,}", v)
    return v


def _mlx(source: str, key: str, d: dict) -> MlxQuant:
    mode = d.get("mode", "affine")
    if mode not in MLX_MODES:
        raise _fail(source, f"{key}.mode", "one of " + ", ".join(MLX_MODES), mode)
    return MlxQuant(_int(source, f"{key}.bits", d.get("bits"), _MAX_BITS),
                    _int(source, f"{key}.group_size", d.get("group_size"), _MAX_GROUP), mode)


def _mlx_block(source: str, q: dict) -> QuantBlock:
    entries = [(k, v) for k, v in q.items() if k not in ("group_size", "bits", "mode")]
    if len(entries) > MAX_QUANT_ENTRIES:
        raise _fail(source, "quantization", f"at most {MAX_QUANT_ENTRIES:,} module entries", f"{len(entries):,}")
    per_path = []
    for path, v in entries:
        if isinstance(v, bool):  # a module the recipe left as it was (utils.load_model's class_predicate)
            continue
        if not isinstance(v, dict):
            raise _fail(source, f"quantization.{path[:80]}", "an object {bits, group_size, mode}", v)
        per_path.append((path, _mlx(source, f"quantization.{path[:80]}", v)))
    return QuantBlock(MLX, _mlx(source, "quantization", q), tuple(per_path))


def _ct_block(source: str, q: dict) -> QuantBlock:
    groups = q.get("config_groups") or {}
    if not isinstance(groups, dict):
        raise _fail(source, "quantization_config.config_groups", "an object", groups)
    if len(groups) > MAX_QUANT_ENTRIES:
        raise _fail(source, "quantization_config.config_groups", f"at most {MAX_QUANT_ENTRIES:,} groups",
                    f"{len(groups):,}")
    fmt = q.get("format") if isinstance(q.get("format"), str) else ""
    out = []
    for name, g in groups.items():
        key = f"quantization_config.config_groups.{str(name)[:80]}"
        if not isinstance(g, dict):
            raise _fail(source, key, "an object", g)
        w = g.get("weights")
        if w is None:
            continue  # activations only: the weight is stored as it was
        if not isinstance(w, dict):
            raise _fail(source, f"{key}.weights", "an object", w)
        gs = w.get("group_size")
        out.append(CtGroup(
            g["format"] if isinstance(g.get("format"), str) else fmt,
            _int(source, f"{key}.weights.num_bits", w.get("num_bits"), _MAX_BITS),
            w["strategy"] if isinstance(w.get("strategy"), str) else "",
            None if gs is None else _int(source, f"{key}.weights.group_size", gs, _MAX_GROUP),
            w.get("symmetric", True) is not False, w["type"] if isinstance(w.get("type"), str) else "int"))
    return QuantBlock(COMPRESSED_TENSORS, format=fmt, groups=tuple(out))


def quant_block(data: dict, source: str) -> QuantBlock | None:
    """The producer's quantisation block of a decoded config.json, None where it holds neither."""
    q = data.get("quantization")
    if isinstance(q, dict):
        return _mlx_block(source, q)
    qc = data.get("quantization_config")
    if not isinstance(qc, dict):
        return None
    if qc.get("quant_method") == COMPRESSED_TENSORS:
        return _ct_block(source, qc)
    if qc.get("quant_method") == "fp8" and qc.get("scale_fmt") == "ue8m0" and qc.get("weight_block_size") == [32, 32]:
        return QuantBlock(RELEASE_FP8, MlxQuant(8, 32, "mxfp8"))
    return None
