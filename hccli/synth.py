"""Writing sample checkpoints from a config's inventory.

- tiny: real random values in every tensor (fixtures, demos, kernel runs);
- phantom: the full-scale layout of any config, with real headers, real values
  in the hc base and scale tensors, and every other byte (the hc fn projections
  included) left as a hole of a sparse file: a 510 GB V4.1-Flash takes a few MB.

Shards follow a release's order: the embedding first, then one shard per layer
in order (an Engram table on a shard of its own right after its layer), one per
DSpark/MTP stage, then the final norm and head, then vision. For V4.1-Flash
that gives 48 shards, as published.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from hccli.config import ModelConfig, load_config
from hccli.errors import HcError
from hccli.inventory import Inventory, TensorSpec, build_inventory

INDEX_NAME = "model.safetensors.index.json"
ALIGN = 8  # safetensors pads the header with spaces to this


@dataclass(frozen=True)
class ShardPlan:
    file: str
    tensors: tuple[TensorSpec, ...]


@dataclass(frozen=True)
class WrittenCheckpoint:
    outdir: Path
    shards: tuple[str, ...]
    tensors: int
    total_size: int  # sum of the tensors' byte spans, as the index records
    file_bytes: int  # apparent size of all shard files
    phantom: bool


def _shard_key(t: TensorSpec) -> str:
    if t.scope == "vision":
        return "vision"
    if t.name == "embed.weight":
        return "embed"
    if t.layer is None:
        return "final"
    if t.name.endswith(("engram.embed.weight", "engram.embed.scale")):
        return f"engram-table:{t.layer}"
    return f"layer:{t.layer}"


def plan_shards(inv: Inventory) -> list[ShardPlan]:
    groups: dict[str, list[TensorSpec]] = {}
    for t in inv.tensors:
        groups.setdefault(_shard_key(t), []).append(t)
    keys = sorted(groups, key=lambda k: _shard_rank(k, inv))
    n = len(keys)
    return [ShardPlan(f"model-{i + 1:05d}-of-{n:05d}.safetensors", tuple(groups[k])) for i, k in enumerate(keys)]


def _shard_rank(key: str, inv: Inventory) -> tuple[int, int, int]:
    kind, _, layer = key.partition(":")
    n = inv.config.n_layers
    if kind == "embed":
        return (0, 0, 0)
    if kind == "layer":
        li = int(layer)
        return (1, li, 0) if li < n else (2, li, 0)
    if kind == "engram-table":
        return (1, int(layer), 1)
    if kind == "final":
        return (3, 0, 0)
    return (4, 0, 0)


def header_bytes(tensors: list[tuple[str, str, tuple[int, ...], int]], metadata: dict[str, str] | None) -> bytes:
    """The 8-byte length and the JSON header for (name, dtype, shape, nbytes) in file order."""
    doc: dict = {}
    if metadata:
        doc["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, nbytes in tensors:
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    body = json.dumps(doc, separators=(",", ":")).encode()
    body += b" " * (-len(body) % ALIGN)
    return len(body).to_bytes(8, "little") + body


# ---- values ------------------------------------------------------------------------------------

def to_bf16_bytes(x: np.ndarray) -> bytes:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    return rounded.astype("<u2").tobytes()


def hc_values(cfg: ModelConfig, t: TensorSpec, rng: np.random.Generator) -> np.ndarray | None:
    """Realistic, non-trivial values for hc base/scale (and fn): comb offsets favour
    the diagonal so the Sinkhorn matrix is far from uniform; scales are O(1)."""
    hc = cfg.hc_mult
    part = t.name.rsplit("_", 1)[-1]
    site = t.name.rsplit("hc_", 1)[-1].split("_")[0]
    if part == "scale":
        return rng.uniform(0.3, 1.5, size=t.shape).astype(np.float32)
    if part == "base":
        base = rng.normal(0.0, 0.5, size=t.shape).astype(np.float32)
        if site != "head":
            comb = base[2 * hc:].reshape(hc, hc)
            comb += np.eye(hc, dtype=np.float32) * 2.0
        return base
    if part == "fn":
        return (rng.normal(0.0, 0.02, size=t.shape)).astype(np.float32)
    return None


def random_bytes(cfg: ModelConfig, t: TensorSpec, rng: np.random.Generator) -> bytes:
    n = t.elements
    if "hc_" in t.name and t.component in ("hyper_connections", "dspark") and t.dtype == "F32":
        v = hc_values(cfg, t, rng)
        if v is not None:
            return v.astype("<f4").tobytes()
    if t.dtype == "F32":
        return rng.normal(0.0, 0.02, size=n).astype("<f4").tobytes()
    if t.dtype == "BF16":
        scale = 1.0 if re.search(r"norm\d?\.weight$", t.name) else 0.0  # RMSNorm weights sit near 1
        return to_bf16_bytes(scale + rng.normal(0.0, 0.02, size=n).astype(np.float32))
    if t.dtype == "F8_E4M3":
        # sign | exponent 0-6 | mantissa: finite, |x| < 1; never the NaN codes 0x7F/0xFF
        b = rng.integers(0, 0x38, size=n, dtype=np.uint8) | (rng.integers(0, 2, size=n, dtype=np.uint8) << 7)
        return b.tobytes()
    if t.dtype == "F8_E8M0":
        return rng.integers(118, 128, size=n, dtype=np.uint8).tobytes()  # 2^-9 .. 2^0
    if t.dtype == "I8":
        return rng.integers(-128, 128, size=n, dtype=np.int8).tobytes()
    if t.dtype == "I64":
        hi = max(1, cfg.n_routed_experts)
        return rng.integers(0, hi, size=n, dtype=np.int64).astype("<i8").tobytes()
    raise HcError(f"{t.name}: cannot make values of dtype {t.dtype}")


# ---- writing -----------------------------------------------------------------------------------

def _check_outdir(outdir: Path, force: bool) -> None:
    if outdir.exists() and not outdir.is_dir():
        raise HcError(f"{outdir}: exists and is not a directory; expected a new or empty directory")
    if outdir.is_dir() and any(outdir.iterdir()) and not force:
        raise HcError(f"{outdir}: directory is not empty; expected a new or empty one (or pass --force)")


def make_checkpoint(
    config: str | Path | None,
    outdir: str | Path,
    *,
    phantom: bool = False,
    seed: int = 0,
    force: bool = False,
    max_bytes: int = 2 * 1024**3,
    progress: Callable[[int, int, str], None] | None = None,
) -> WrittenCheckpoint:
    """Write a checkpoint for `config` into `outdir` (shards, index, config.json)."""
    cfg = load_config(config)
    inv = build_inventory(cfg)
    outdir = Path(outdir)
    _check_outdir(outdir, force)
    total = sum(t.nbytes for t in inv.tensors)
    if not phantom and total > max_bytes:
        raise HcError(
            f"{cfg.source}: a checkpoint with values would take {total / 1e9:,.1f} GB "
            f"(limit {max_bytes / 1e9:,.1f} GB); use --phantom for a full-scale sparse layout"
        )
    shards = plan_shards(inv)
    outdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    weight_map: dict[str, str] = {}
    file_bytes = 0
    meta = {"format": "pt", "producer": "hccli make-checkpoint" + (" --phantom" if phantom else "")}
    for k, shard in enumerate(shards):
        if progress:
            progress(k, len(shards), shard.file)
        entries = [(t.name, t.dtype, t.shape, t.nbytes) for t in shard.tensors]
        head = header_bytes(entries, meta)
        path = outdir / shard.file
        tmp = path.with_name(path.name + ".partial")
        with open(tmp, "wb") as f:
            f.write(head)
            base = len(head)
            offset = 0
            for t in shard.tensors:
                if phantom:
                    part = t.name.rsplit("_", 1)[-1]
                    if "hc_" in t.name and part in ("base", "scale"):
                        f.seek(base + offset)
                        f.write(hc_values(cfg, t, rng).astype("<f4").tobytes())
                else:
                    f.write(random_bytes(cfg, t, rng))
                offset += t.nbytes
                weight_map[t.name] = shard.file
            f.truncate(base + offset)  # a hole for every byte not written
        os.replace(tmp, path)
        file_bytes += base + offset
    if progress:
        progress(len(shards), len(shards), "index")
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (outdir / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    src = Path(cfg.source)
    shutil.copyfile(src, outdir / "config.json")
    return WrittenCheckpoint(outdir, tuple(s.file for s in shards), len(inv.tensors), total, file_bytes, phantom)
