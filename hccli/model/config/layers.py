"""Config keys that list layers: compress ratios (and with them the stages), KV and
index sources, Engram layers, DSpark targets. Each must fit the layer count it
refers to; an error names the key, the entry and the range expected."""

from __future__ import annotations

from dataclasses import dataclass

from hccli.model.config.bounds import COMPRESS_RATIO, ENGRAM_ROWS, MAX_LAYERS, MAX_STAGES, SCALARS
from hccli.model.config.keys import KeySpace
from hccli.model.config.read import ConfigError


@dataclass(frozen=True, slots=True)
class LayerLists:
    """The per-layer lists of a config, checked against each other."""

    compress_ratios: tuple[int, ...]
    n_stages: int
    dspark_targets: tuple[int, ...]
    kv_sources: tuple[int, ...]
    index_sources: tuple[int, ...]
    engram_ids: tuple[int, ...]
    engram_rows: tuple[int, ...]
    notes: tuple[str, ...]


def _stages(ks: KeySpace, n_layers: int, notes: list[str]) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    lo, hi, bound, default = SCALARS["n_mtp_layers"]
    declared = ks.int("n_mtp_layers", lo, hi, bound, default)
    ratios = ks.int_list("compress_ratios", *COMPRESS_RATIO, max_len=n_layers + MAX_STAGES)
    targets = ks.int_list("dspark_target_layer_ids", 0, MAX_LAYERS, "hc's bound on layers", MAX_STAGES)
    if not ratios:
        notes.append("no compress_ratios in the config: every layer taken as window-only")
        return (0,) * (n_layers + declared), declared, targets
    if len(ratios) < n_layers:
        raise ks.fail("compress_ratios", f"{n_layers} layers + stages entries, got {len(ratios)} entries")
    n_stages = len(ratios) - n_layers
    if n_stages != declared:
        # The 0731/0813 hub configs declare 1 next-token layer although their
        # checkpoints carry one DSpark stage per dspark target layer.
        if targets and n_stages == len(targets):
            notes.append(f"'{ks.where('n_mtp_layers')}' says {declared} but compress_ratios and "
                         f"dspark_target_layer_ids imply {n_stages} DSpark stages; using {n_stages}")
        else:
            raise ks.fail("compress_ratios", f"{n_layers} layers + {declared} stages = {n_layers + declared} "
                          f"entries ('{ks.where('n_mtp_layers')}' = {declared}), got {len(ratios)}")
    return ratios, n_stages, targets


def _layer_ids(ks: KeySpace, key: str, n_layers: int) -> tuple[int, ...]:
    ids = ks.int_list(key, 0, MAX_LAYERS, "hc's bound on layers", max_len=n_layers)
    for i, x in enumerate(ids):
        if x >= n_layers:
            raise ConfigError(ks.source, f"key '{ks.where(key)}[{i}]': layer {x} out of range; "
                              f"expected 0..{n_layers - 1}", key=f"{ks.where(key)}[{i}]",
                              expected=f"a layer 0..{n_layers - 1}", got=str(x))
    if len(set(ids)) != len(ids):
        raise ks.fail(key, "distinct layer ids", list(ids))
    return tuple(sorted(ids))


def layer_lists(ks: KeySpace, n_layers: int) -> LayerLists:
    notes: list[str] = []
    ratios, n_stages, targets = _stages(ks, n_layers, notes)
    if targets and len(targets) != n_stages:
        raise ks.fail("dspark_target_layer_ids", f"one id per DSpark stage ({n_stages}), got {len(targets)}")
    kv_sources = _layer_ids(ks, "kv_source_layers", n_layers)
    index_sources = _layer_ids(ks, "index_source_layers", n_layers)
    engram_ids = _layer_ids(ks, "engram_layer_ids", n_layers)
    _layer_ids(ks, "dspark_target_layer_ids", n_layers)
    for i, layer in enumerate(kv_sources):
        if ratios[layer] == 0:
            where = f"{ks.where('kv_source_layers')}[{i}]"
            raise ConfigError(ks.source, f"key '{where}': layer {layer} has compress ratio 0; expected a compressed "
                              "layer", key=where, expected="a compressed layer", got=f"layer {layer}, ratio 0")
    if kv_sources:
        first_compressed = next((i for i in range(n_layers) if ratios[i] > 0), None)
        if first_compressed is not None and first_compressed < kv_sources[0]:
            raise ks.fail("kv_source_layers", f"a source at or before the first compressed layer {first_compressed}",
                          list(kv_sources))
    engram_rows = ks.int_list("engram_num_embeddings", *ENGRAM_ROWS, max_len=n_layers)
    if engram_ids and len(engram_rows) != len(engram_ids):
        raise ks.fail("engram_num_embeddings", f"one row count per Engram layer ({len(engram_ids)})",
                      list(engram_rows))
    return LayerLists(ratios, n_stages, targets, kv_sources, index_sources, engram_ids, engram_rows, tuple(notes))
