"""The layer plan: the role of every layer and the groups those roles form.

Everything is derived from the config's lists (compress_ratios, kv/index source
layers, Engram layers, hash layers, stages); nothing is specific to one model.

Roles of a backbone layer's attention:
- window:     compress ratio 0, sliding window only
- source:     a KV source: owns the KV compressor and the indexer's key side
- reindex:    reads the source's KV but runs its own indexer query side
- reuse:      reads the source's KV and reuses the published top-k
- compressed: owns its compressor (families without KV sources, i.e. V4)
Tags beside the role: engram (an Engram module sits before it), hash (hash-routed
MoE). DSpark/MTP stages come after the backbone, numbered n_layers + s, named mtp.s.
"""

from __future__ import annotations

from dataclasses import dataclass

from hccli.model.config.model import ModelConfig
from hccli.base.errors import HcError


@dataclass(frozen=True, slots=True)
class LayerInfo:
    """One backbone layer or stage, with its KV role."""

    index: int  # backbone 0..n_layers-1; stages n_layers + s
    name: str  # "layers.3" or "mtp.0"
    is_stage: bool
    compress_ratio: int
    role: str
    kv_source: int | None  # the KV source layer it reads (itself for a source)
    engram: bool
    hash_routed: bool
    group: int  # index into LayerPlan.groups

    @property
    def tags(self) -> tuple[str, ...]:
        t = [self.role]
        if self.engram:
            t.append("engram")
        if self.hash_routed:
            t.append("hash")
        if self.is_stage:
            t.append("stage")
        return tuple(t)


@dataclass(frozen=True, slots=True)
class Group:
    """A run of layers that the layer-group table shows as one row."""

    index: int
    first: int
    last: int
    kind: str  # "window" | "kv" | "compressed" | "stages"
    description: str

    @property
    def label(self) -> str:
        return f"{self.first}-{self.last}" if self.last != self.first else f"{self.first}"

    @property
    def size(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class LayerPlan:
    """Every layer and stage of a model, and their groups."""

    layers: tuple[LayerInfo, ...]
    groups: tuple[Group, ...]
    n_backbone: int

    @property
    def backbone(self) -> tuple[LayerInfo, ...]:
        return self.layers[: self.n_backbone]

    @property
    def stages(self) -> tuple[LayerInfo, ...]:
        return self.layers[self.n_backbone:]

    def groups_spanning(self, first: int, last: int) -> tuple[int, ...] | None:
        """The groups that exactly cover layers first..last; None when the bounds cut into a group."""
        starts = [g.index for g in self.groups if g.first == first]
        ends = [g.index for g in self.groups if g.last == last]
        if not starts or not ends or ends[0] < starts[0]:
            return None
        return tuple(range(starts[0], ends[0] + 1))


def format_ranges(xs) -> str:
    """Sorted layer numbers as runs: [2, 3, 4, 8, 14, 15] -> '2-4,8,14-15'."""
    xs = sorted(xs)
    out, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(f"{xs[i]}-{xs[j]}" if j > i else str(xs[i]))
        i = j + 1
    return ",".join(out)


def no_site_matches(where: str, held, layers, sites, what: str = "HC site") -> str:
    """The one line of a --layers/--site selection that kept no site (diff, run-site): which option
    matched nothing alone, and what there is; or, each keeping some, that they keep none together.
    held: the (layer, site) pairs there are; layers, sites: the selection (None: every one)."""
    held = sorted(set(held))
    all_layers = format_ranges({layer for layer, _ in held}) or "none"
    all_sites = ", ".join(dict.fromkeys(site for _, site in held)) or "none"
    at_layers = [p for p in held if layers is None or p[0] in layers]
    of_sites = [p for p in held if sites is None or p[1] in sites]
    asked_l = f"--layers {format_ranges(layers)}" if layers is not None else ""
    asked_s = f"--site {','.join(sorted(sites))}" if sites is not None else ""
    if layers is not None and not at_layers:
        return f"{where}: {asked_l} matches no {what}: they are at layers {all_layers}"
    if sites is not None and not of_sites:
        return f"{where}: {asked_s} matches no {what}: the sites there are {all_sites}"
    here = ", ".join(dict.fromkeys(s for _, s in at_layers))
    there = format_ranges({layer for layer, _ in of_sites})
    return (f"{where}: {asked_l} and {asked_s} match no {what} together: there, the sites are {here}; "
            f"the {asked_s.split(' ', 1)[1]} sites are at layers {there}")


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """Layers as a user wrote them (`3-7,mtp.0,head`), before a model says what they number:
    plain numbers (stage k is also number n_layers + k, the root head mix n_layers + n_stages),
    stage names `mtp.k`, and the root head mix by name. `text` and `flag` are what was typed,
    so that the one out-of-range line can quote it."""

    numbers: frozenset[int] = frozenset()
    stages: frozenset[int] = frozenset()
    head: bool = False
    text: str = ""
    flag: str = "--layers"

    def __len__(self) -> int:  # how many items were named: run-kernel takes one
        return len(self.numbers) + len(self.stages) + int(self.head)


def describe_layers(n_layers: int, n_stages: int, head_mix: bool) -> str:
    """'layers 0-7, mtp.0-mtp.1 (8-9) and head (10)': what a model's layer numbers are."""
    parts = [f"layers {format_ranges(range(n_layers))}"] if n_layers else []
    if n_stages:
        names = "mtp.0" if n_stages == 1 else f"mtp.0-mtp.{n_stages - 1}"
        parts.append(f"{names} ({format_ranges(range(n_layers, n_layers + n_stages))})")
    if head_mix:
        parts.append(f"head ({n_layers + n_stages})")
    said = (", ".join(parts[:-1]) + " and " + parts[-1]) if len(parts) > 1 else "".join(parts) or "no layers"
    return said + ("" if head_mix else "; no head mix")


def check_layer_range(layers, n_layers: int, n_stages: int, head_mix: bool, where: str = "") -> frozenset[int]:
    """The layer numbers `layers` (a LayerSpec, or numbers a library caller gives) select in a
    model of n_layers backbone layers, n_stages stages and (where `head_mix`) a root head mix;
    an HcError, the one line every command gives, where any of them is not there:
    `--layers 99: this model has layers 0-7, mtp.0-mtp.1 (8-9) and head (10)`. Numbers a library
    caller gave (no flag was typed) are said after `where`, the model's label."""
    if isinstance(layers, LayerSpec):
        numbers = set(layers.numbers) | {n_layers + k for k in layers.stages}
        past = (any(k >= n_stages for k in layers.stages) or (layers.head and not head_mix))
        if layers.head:
            numbers.add(n_layers + n_stages)
        asked = f"{layers.flag} {layers.text}"
    else:
        numbers, past = set(layers), False
        asked = f"{where + ': ' if where else ''}layer{'s' if len(numbers) != 1 else ''} {format_ranges(numbers)}"
    last = n_layers + n_stages - (0 if head_mix else 1)
    if past or any(n > last or n < 0 for n in numbers):
        raise HcError(f"{asked}: this model has {describe_layers(n_layers, n_stages, head_mix)}")
    return frozenset(numbers)


def _role(cfg: ModelConfig, i: int) -> tuple[str, int | None]:
    ratio = cfg.compress_ratios[i]
    if ratio == 0:
        return "window", None
    if not cfg.kv_source_layers:
        return "compressed", i
    source = max((s for s in cfg.kv_source_layers if s <= i), default=None)
    if source is None:  # validated away in model/config/model.py; kept for safety
        return "compressed", i
    if i == source:
        return "source", source
    if i in cfg.index_source_layers:
        return "reindex", source
    return "reuse", source


def _describe(cfg: ModelConfig, members: list[tuple[int, str, int | None]], kind: str) -> str:
    ratios = sorted({cfg.compress_ratios[i] for i, _, _ in members})
    ratio_text = "ratio " + "/".join(str(r) for r in ratios)
    if kind == "window":
        return "window only"
    if kind == "stages":
        noun = "DSpark" if cfg.stage_kind == "dspark" else "MTP"
        return f"{len(members)} {noun} stage{'s' if len(members) != 1 else ''}"
    if kind == "compressed":
        return f"{len(members)} layers, each with its own compressor ({ratio_text})"
    source = members[0][0]
    reindex = [i for i, role, _ in members if role == "reindex"]
    reuse = sum(1 for _, role, _ in members if role == "reuse")
    parts = [f"KV source {source}"]
    if reindex:
        parts.append("re-index " + ",".join(str(i) for i in reindex))
    parts.append(f"{reuse} reusing")
    return ", ".join(parts) + f" ({ratio_text})"


def plan_layers(cfg: ModelConfig) -> LayerPlan:
    n = cfg.n_layers
    rows = [(i, *_role(cfg, i)) for i in range(n)]
    # A group is a run of window-only layers, a KV source with the layers that
    # read it, or (without KV sources) a run of self-compressing layers.
    groups: list[tuple[str, list]] = []
    for row in rows:
        i, role, _ = row
        kind = "window" if role == "window" else ("compressed" if role == "compressed" else "kv")
        starts_new = (
            not groups
            or groups[-1][0] != kind
            or role == "source"
        )
        if starts_new:
            groups.append((kind, [row]))
        else:
            groups[-1][1].append(row)
    stage_rows = [(n + s, "window" if cfg.compress_ratios[n + s] == 0 else "compressed", None)
                  for s in range(cfg.n_stages)]
    if stage_rows:
        groups.append(("stages", stage_rows))

    group_objs = []
    layer_group: dict[int, int] = {}
    for g, (kind, members) in enumerate(groups):
        group_objs.append(Group(g, members[0][0], members[-1][0], kind, _describe(cfg, members, kind)))
        for i, _, _ in members:
            layer_group[i] = g

    layers = []
    for i, role, source in rows + stage_rows:
        is_stage = i >= n
        layers.append(
            LayerInfo(
                index=i,
                name=f"mtp.{i - n}" if is_stage else f"layers.{i}",
                is_stage=is_stage,
                compress_ratio=cfg.compress_ratios[i],
                role=role,
                kv_source=source,
                engram=(not is_stage) and i in cfg.engram_layer_ids,
                hash_routed=(not is_stage) and i < cfg.n_hash_layers,
                group=layer_group[i],
            )
        )
    return LayerPlan(tuple(layers), tuple(group_objs), n)
