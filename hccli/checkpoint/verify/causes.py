"""--verify's root causes: the one problem behind many findings.

- A shard that could not be read, is not there, or lies outside the checkpoint: the tensors the
  index places in it are missing because of it (without an index, the one such shard of a
  checkpoint is where every missing tensor was; with several, none is named). Its finding says
  how many tensors the index places there and which HC sites.
- A config of another model: model_shape.differences between the config and the checkpoint's
  own figures (family, layers, stages, hc_mult, dim), one config_mismatch finding that says both
  sides; every finding of the config's inventory, and each HC shape held to the config's
  hc_mult, follows from it.

The follow-ons name their root's id as `cause` (findings.py). Opening makes the comparison
too, where config_fit's fast accept does not accept (damage.py): its config_mismatch is the
root here. Nothing here runs for a checkpoint that agrees with its index and its config: no
shard is gone and no inventory finding is there to explain.
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import contains

from hccli.base.words import plural
from hccli.names import dialects as D
from hccli.base.bounded import one_line
from hccli.checkpoint import hc as H
from hccli.checkpoint.verify.config_fit import HEAD_FN, STAGES_HELD
from hccli.checkpoint.verify.findings import Finding, caused, finding
from hccli.checkpoint.shardset import Checkpoint
from hccli.model.config.model import ModelConfig
from hccli.model.shape import Difference, ModelShape, differences, from_hc_shapes, said
from hccli.base.vocab import parse_hc_name

# HC owners (layers.3, mtp.0, head) a gone shard's finding names; the rest are counted
OWNERS_NAMED = 6
MISMATCH_ID = "config_mismatch"
DIFFERENT = "the config and the checkpoint are different models"
FIGURES = "the checkpoint's figures from its tensor names and shapes"
# codes a config of another model does not explain: the names' dialect is the checkpoint's own
_NOT_FROM_CONFIG = frozenset(("unmapped_tensor",))


class GoneShards:
    """The shards whose tensors are not there to check: unreadable, missing, outside the checkpoint."""

    def __init__(self, ckpt: Checkpoint):
        self.ckpt = ckpt
        self.code = {**{s.file: "unreadable_shard" for s in ckpt.shards if s.header is None},
                     **dict.fromkeys(ckpt.unsafe, "unsafe_shard_path"), **dict.fromkeys(ckpt.missing, "missing_shard")}
        self._held: dict[str, list[str]] | None = None
        self._by_name: dict[str, str] | None = None

    def __bool__(self) -> bool:
        return bool(self.code)

    def id_of(self, file: str) -> str:
        return f"{self.code[file]}:{one_line(file, 200)}"

    def held(self) -> dict[str, list[str]]:
        """file -> the names the index places there (none without an index), one pass over it."""
        if self._held is None:
            out: dict[str, list[str]] = {f: [] for f in self.code}
            if self.ckpt.index is not None:
                for name, file in self.ckpt.index.weight_map.items():
                    got = out.get(file)
                    if got is not None:
                        got.append(name)
            self._held = out
        return self._held

    def root(self, file: str, message: str) -> Finding:
        """The shard's finding, with what the index places there."""
        return finding(self.code[file], message + self._contents(file), root_id=self.id_of(file))

    def _contents(self, file: str) -> str:
        if self.ckpt.index is None:
            return ""
        names = self.held()[file]
        dialect = self.ckpt.dialect.dialect
        owners: dict[str, list[str]] = {}
        for hn in filter(None, (D.hc_name(n, dialect) for n in names)):
            sites = owners.setdefault(hn.owner or "head", [])
            if hn.site not in sites:
                sites.append(hn.site)
        if not owners:
            return f"; the index places {plural(len(names), 'tensor')} there, none of them HC"
        order = sorted(owners, key=lambda o: (o == "head", o.split(".")[0], int(o.split(".")[-1]) if "." in o else 0))
        shown = ", ".join(f"{o} ({', '.join(owners[o])})" if o != "head" else o for o in order[:OWNERS_NAMED])
        rest = f" and {len(order) - OWNERS_NAMED:,} more" if len(order) > OWNERS_NAMED else ""
        sites = sum(map(len, owners.values()))
        return f"; the index places {plural(len(names), 'tensor')} there, those of {plural(sites, 'HC site')} among them: {shown}{rest}"

    def file_of(self, canonical: str | None) -> str | None:
        """The gone shard a tensor (canonical name) was in, else None; without an index, the one
        gone shard where there is only one (with several, none is named)."""
        if not self.code or canonical is None:
            return None
        if self.ckpt.index is None:
            return next(iter(self.code)) if len(self.code) == 1 else None
        if self._by_name is None:
            dialect = self.ckpt.dialect.dialect
            self._by_name = {(n if dialect == D.RELEASE else D.canonical_name(n, dialect) or n): f
                             for f, names in self.held().items() for n in names}
        return self._by_name.get(canonical)

    def cause_of(self, canonical: str | None) -> str | None:
        """The root id of the gone shard a tensor (canonical name) was in, else None."""
        file = self.file_of(canonical)
        return None if file is None else self.id_of(file)


def own_shape(ckpt: Checkpoint, gone: GoneShards) -> ModelShape:
    """The checkpoint's own figures: hc_mult and dim from its HC shapes; layers and stages from
    its names (and the index's names of gone shards); family from a head mix and Engram tensors.
    Where shards are gone and no index says what they held, layers and stages are at least what
    is seen (held against the config only when more) and the family is not known."""
    dialect = ckpt.dialect.dialect
    extra = list(chain.from_iterable(gone.held().values())) if gone else []
    layers, stages = H.own_layer_counts(ckpt, extra)
    shapes = from_hc_shapes((parse_hc_name(s.tensor_name(p)), info.shape)
                            for s in ckpt.hc_sites for p, (_, info) in s.parts.items())
    names = ckpt.all_names()
    head = any(s.owner == "" for s in ckpt.hc_sites) or any(
        h is not None and not h.kind for h in (D.hc_name(n, dialect) for n in extra))
    engram = any(map(contains, chain(names, extra), repeat(".engram.")))
    family = "v4" if head and not engram else "v4.1" if engram and not head else None
    if D.spell_hc(HEAD_FN, dialect) is None:
        family = None  # a layout without a head mix says nothing of the family by lacking one
    cfg = ckpt.config
    if gone and ckpt.index is None:
        layers = layers if layers > cfg.n_layers else None
        stages = stages if stages > cfg.n_stages else None
        family = None
    return ModelShape(shapes.hc_mult, layers, shapes.dim, "tensor names and shapes", family,
                      stages if dialect in STAGES_HELD else None)


def config_shape(cfg: ModelConfig) -> ModelShape:
    """The figures a config gives, as the checkpoint's own are held to them."""
    return ModelShape(cfg.hc_mult, cfg.n_layers, cfg.dim, "config", cfg.family, cfg.n_stages)


def mismatch_differences(ckpt: Checkpoint, gone: GoneShards) -> list[Difference]:
    """How the config and the checkpoint are different models, each figure (a: the config's)."""
    return differences(config_shape(ckpt.config), own_shape(ckpt, gone))


def words_of(diffs: list[Difference]) -> str:
    """The differences in words: "the config has 61 layers, the checkpoint 40; ..."."""
    return "; ".join(said(d, "the config", "the checkpoint") for d in diffs)


def mismatch_words(ckpt: Checkpoint, gone: GoneShards) -> str | None:
    """How the config and the checkpoint are different models, in words, else None."""
    return words_of(mismatch_differences(ckpt, gone)) or None


def mismatch(ckpt: Checkpoint, gone: GoneShards) -> Finding | None:
    """config_mismatch where the config and the checkpoint are different models, else None."""
    words = mismatch_words(ckpt, gone)
    return None if words is None else mismatch_of(ckpt, words)


def mismatch_of(ckpt: Checkpoint, words: str) -> Finding:
    """The config_mismatch finding of a config used as given, whose differences are `words`."""
    return mismatch_finding(f"{DIFFERENT}: {words} (config {ckpt.config.source}; {FIGURES})")


def mismatch_finding(message: str) -> Finding:
    """The one config_mismatch finding, the root of what follows from it."""
    return finding("config_mismatch", message, root_id=MISMATCH_ID)


def grouped(ckpt: Checkpoint, gone: GoneShards, first: list[Finding], hc: list[Finding], against: set[int],
            later: list[Finding], config: list[Finding]) -> list[Finding]:
    """Every finding in verify's order, each follow-on naming its cause; `against`: the ids of the
    HC shape findings held to the config's hc_mult. A config of another model comes first: the
    one opening found (checkpoint/verify/damage.py), else the one these findings make worth looking for."""
    root = ckpt.config_clash
    if root is None and ckpt.config is not None and (config or against):
        root = mismatch(ckpt, gone)
    if root is not None:
        hc = [caused(f, MISMATCH_ID) if id(f) in against else f for f in hc]
        config = [f if f.code in _NOT_FROM_CONFIG else caused(f, MISMATCH_ID) for f in config]
    if gone:
        hc = [_gone_cause(f, gone) for f in hc]
        config = [_gone_cause(f, gone) for f in config]
    return [*([root] if root else []), *first, *hc, *later, *config]


def _gone_cause(f: Finding, gone: GoneShards) -> Finding:
    """A finding of a tensor or site that was in a gone shard follows from it."""
    if f.cause is not None or f.code not in ("hc_incomplete", "hc_missing_site", "partial_inventory"):
        return f
    cause = gone.cause_of(f.subject)
    return f if cause is None else caused(f, cause)
