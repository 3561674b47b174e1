"""Writing sample checkpoints from a config's inventory.

- tiny: real random values in every tensor (fixtures, demos, kernel runs);
- phantom: the full-scale layout of any config, with real headers, real values
  in the hc base and scale tensors, and every other byte (the hc fn projections
  included) left as a hole of a sparse file: a 510 GB V4.1-Flash takes a few MB.

Each tensor goes to the shard the inventory names (the published placement for
the five releases, hccli/model/releases.py), and each shard header is what
safetensors' own serializer writes for those tensors (hccli/checkpoint/safetensors/layout.py), with
no __metadata__: a phantom shard of a release has the published file's size.
What made a checkpoint is said in the index's metadata (`producer`), never in
the shards.

The checkpoint is written into a temporary sibling directory and renamed into
place at the end (hccli/base/atomic_dir.py): an error or Ctrl-C leaves no
half-written OUTDIR.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

from hccli.base.atomic_dir import os_error, staged_directory
from hccli.model.config.model import ModelConfig, load_config
from hccli.base.errors import HcError
from hccli.base.floats import bf16_bits
from hccli.model.inventory import build_inventory
from hccli.model.inventory_types import Inventory, TensorSpec
from hccli.checkpoint.safetensors.layout import header_bytes, serializer_order
from hccli.base.vocab import INDEX_NAME, parse_hc_name

__all__ = ["INDEX_NAME", "PRODUCER", "ShardPlan", "WrittenCheckpoint", "header_bytes", "make_checkpoint",
           "plan_shards", "shard_header"]

PRODUCER = "hccli make-checkpoint"  # the index's metadata.producer; "... --phantom" for a phantom


@dataclass(frozen=True)
class ShardPlan:
    file: str
    tensors: tuple[TensorSpec, ...]  # in file order (the serializer's)


@dataclass(frozen=True)
class WrittenCheckpoint:
    outdir: Path
    shards: int  # shard files written
    tensors: int
    total_size: int  # sum of the tensors' byte spans, as the index records
    file_bytes: int  # apparent size of all shard files
    phantom: bool


def plan_shards(inv: Inventory) -> list[ShardPlan]:
    groups: dict[int, list[TensorSpec]] = {}
    for t in inv.tensors:
        groups.setdefault(t.shard, []).append(t)
    return [ShardPlan(inv.layout.file(k), tuple(serializer_order(groups[k]))) for k in sorted(groups)]


def shard_header(shard: ShardPlan) -> bytes:
    """The header bytes safetensors' serializer writes for this shard's tensors (no metadata)."""
    return header_bytes([(t.name, t.dtype, t.shape, t.nbytes) for t in shard.tensors])


def _ours(name: str) -> bool:
    """Entries of an existing OUTDIR that --force may replace: what make-checkpoint writes."""
    return name.endswith((".safetensors", ".partial")) or name in (INDEX_NAME, "config.json")


# ---- values ------------------------------------------------------------------------------------

def to_bf16_bytes(x: np.ndarray) -> bytes:
    """float32 values as BF16 bytes, rounded to nearest even (floats.bf16_bits)."""
    return bf16_bits(x).astype("<u2").tobytes()


def hc_values(cfg: ModelConfig, t: TensorSpec, rng: np.random.Generator) -> np.ndarray | None:
    """Realistic, non-trivial values for hc base/scale (and fn): comb offsets favour
    the diagonal so the Sinkhorn matrix is far from uniform; scales are O(1)."""
    hc = cfg.hc_mult
    name = parse_hc_name(t.name)
    if name is None:
        return None
    part, site = name.part, name.site
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
    if t.dtype == "F32" and parse_hc_name(t.name) is not None:
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

def _write_shard(path: Path, shard: ShardPlan) -> int:
    """The header, and a hole for every byte of data (values are written after); returns
    where the data starts."""
    head = shard_header(shard)
    with open(path, "xb") as f:  # x: a fresh directory, and never through a planted link
        f.write(head)
        f.truncate(len(head) + sum(t.nbytes for t in shard.tensors))
    return len(head)


def _draw_order(inv: Inventory) -> list[TensorSpec]:
    """The order the random values are drawn in: embed, each layer with its Engram table, stages,
    final, vision, whatever shard a tensor goes to, so that a seed gives the same values
    whatever the shard layout (README examples, golden figures)."""
    n = inv.config.n_layers

    def rank(t: TensorSpec) -> tuple[int, int, int]:
        if t.scope == "vision":
            return (4, 0, 0)
        if t.name == "embed.weight":
            return (0, 0, 0)
        if t.layer is None:
            return (3, 0, 0)
        if t.name.endswith(("engram.embed.weight", "engram.embed.scale")):
            return (1, t.layer, 1)
        return (1, t.layer, 0) if t.layer < n else (2, t.layer, 0)

    return sorted(inv.tensors, key=rank)


def _write_values(tmp: Path, inv: Inventory, shards: list[ShardPlan], data_start: dict[str, int],
                  rng: np.random.Generator, phantom: bool) -> None:
    where: dict[str, tuple[str, int]] = {}
    for s in shards:
        offset = data_start[s.file]
        for t in s.tensors:
            where[t.name] = (s.file, offset)
            offset += t.nbytes
    files: dict[str, BinaryIO] = {}
    try:
        for t in _draw_order(inv):
            if phantom:
                name = parse_hc_name(t.name)
                if name is None or name.part not in ("base", "scale"):
                    continue  # a hole
                data = hc_values(inv.config, t, rng).astype("<f4").tobytes()  # type: ignore[union-attr]
            else:
                data = random_bytes(inv.config, t, rng)
            file, offset = where[t.name]
            if file not in files:
                if len(files) >= 64:  # a bound on open files for configs of many layers
                    _close_all(files)
                files[file] = open(tmp / file, "r+b")
            files[file].seek(offset)
            files[file].write(data)
    finally:
        _close_all(files)
    for s in shards:
        fd = os.open(tmp / s.file, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _close_all(files: dict[str, BinaryIO]) -> None:
    for f in files.values():
        f.close()
    files.clear()


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
    """Write a checkpoint for `config` at `outdir` (shards, index, config.json), whole or not at all.
    force replaces an existing OUTDIR that holds only checkpoint files."""
    if seed < 0:
        raise HcError(f"seed {seed}: expected a non-negative integer")
    cfg = load_config(config)
    src = Path(cfg.source)
    try:
        config_bytes = src.read_bytes()  # before anything moves: it may be OUTDIR/config.json
    except OSError as exc:
        raise os_error(src, "read it", exc) from None
    inv = build_inventory(cfg)
    total = inv.total_size
    if not phantom and total > max_bytes:
        raise HcError(
            f"{cfg.source}: a checkpoint with values would take {total / 1e9:,.1f} GB "
            f"(limit {max_bytes / 1e9:,.1f} GB); use --phantom for a full-scale sparse layout"
        )
    shards = plan_shards(inv)
    rng = np.random.default_rng(seed)
    outdir = Path(outdir)
    file_bytes = 0
    data_start: dict[str, int] = {}
    with staged_directory(outdir, force=force, ours=_ours) as tmp:
        what = "write"
        try:
            for k, shard in enumerate(shards):
                if progress:
                    progress(k, len(shards), shard.file)
                what = f"write {shard.file}"
                data_start[shard.file] = _write_shard(tmp / shard.file, shard)
                file_bytes += data_start[shard.file] + sum(t.nbytes for t in shard.tensors)
            what = "write the tensors' values"
            _write_values(tmp, inv, shards, data_start, rng, phantom)
            if progress:
                progress(len(shards), len(shards), "index")
            weight_map = {t.name: s.file for s in shards for t in s.tensors}
            producer = PRODUCER + (" --phantom" if phantom else "")
            index = {"metadata": {"total_size": total, "producer": producer}, "weight_map": weight_map}
            what = f"write {INDEX_NAME}"
            _write_file(tmp / INDEX_NAME, (json.dumps(index, indent=2) + "\n").encode())
            what = "write config.json"
            _write_file(tmp / "config.json", config_bytes)
        except OSError as exc:
            raise os_error(outdir, what, exc, f"{outdir} is left as it was") from None
    return WrittenCheckpoint(outdir, len(shards), len(inv.tensors), total, file_bytes, phantom)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
