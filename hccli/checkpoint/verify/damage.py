"""What every command says of a checkpoint, --verify or not: the damage opening already knows.

- A shard file the index names (or the -of-N names of the other shards or of a GGUF split set
  imply) that is not there: opening stat'ed each name when it planned the reads.
- A config of another model: config_fit's fast accept holds the config to the figures of the HC
  sites found at opening; only where one differs is --verify's whole comparison made
  (causes.mismatch_words), which may yet find the same model.

Each is a finding with --verify's code and words (missing_shard, config_mismatch), so that one
fact has one code whether --verify runs or not. A command that needs a tensor the index places
in a shard that is gone names that shard (`why_absent`), not the tensor. Nothing here reads a
byte of the checkpoint, and a checkpoint without damage costs no import of facts.py or causes.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from hccli.base.bounded import one_line
from hccli.model.config.model import USED_INSTEAD, ConfigUnusable, ModelConfig
from hccli.base.vocab import hc_tensor_name

if TYPE_CHECKING:
    from hccli.checkpoint.verify.findings import Finding
    from hccli.checkpoint.shardset import Checkpoint
    from hccli.model.shape import Difference

SET_ASIDE_EXPECTED = "the model the checkpoint's tensor shapes describe"


def findings(ckpt: Checkpoint) -> list[Finding]:
    """The damage every command reports: a config of another model, then each shard that is
    named and not there (as --verify words them)."""
    out = [ckpt.config_clash] if ckpt.config_clash is not None else []
    if ckpt.missing:
        from hccli.checkpoint.verify.facts import GoneShards

        out += GoneShards(ckpt).missing_roots()
    return out


def why_absent(ckpt: Checkpoint, canonical: str) -> str | None:
    """Why a tensor (canonical name) that is not in the checkpoint is not, where a gone shard
    explains it: the index places it in a shard that is missing, unreadable or outside the
    checkpoint (or, without an index, the one shard that is gone). None otherwise."""
    return absence(ckpt)(canonical)


def absence(ckpt: Checkpoint) -> Callable[[str], str | None]:
    """why_absent for many names: what the index places in the gone shards is gathered once,
    on the first name asked about."""
    if not (ckpt.missing or ckpt.unsafe or any(s.header is None for s in ckpt.shards)):
        return lambda canonical: None
    from hccli.checkpoint.verify.facts import GoneShards

    gone = GoneShards(ckpt)

    def why(canonical: str) -> str | None:
        file = gone.file_of(canonical)
        if file is None:
            return None
        shown = one_line(file, 200)
        placed = f"the index places '{canonical}' in" if ckpt.index is not None else \
            f"'{canonical}' is not here, and may have been in"
        code = gone.code[file]
        if code == "missing_shard":
            return f"{placed} shard '{shown}', which is missing from {ckpt.label}"
        if code == "unsafe_shard_path":
            return f"{placed} shard '{shown}', which lies outside the checkpoint directory and is not opened"
        error = next((s.error for s in ckpt.shards if s.file == file), None) or "unreadable"
        return f"{placed} shard '{shown}', which could not be read ({one_line(error, 200)})"
    return why


def site_absent(ckpt: Checkpoint, layer: int, site: str, why: Callable[[str], str | None] | None = None
                ) -> str | None:
    """why_absent of the first of a site's tensors that is not here (the site by layer number, as
    everywhere: stages after the backbone, the root head mix last) where a gone shard explains
    it, else None. why: absence(ckpt), where many sites are asked about."""
    n, stages = ckpt.n_layers, ckpt.n_stages
    owner = f"layers.{layer}" if layer < n else f"mtp.{layer - n}" if layer < n + stages else ""
    have = next((s.parts for s in ckpt.hc_sites if s.layer == layer and s.site == site), {})
    lacking = [hc_tensor_name(owner, site, part) for part in ("fn", "base", "scale") if part not in have]
    return next(filter(None, map(why or absence(ckpt), lacking)), None) if lacking else None


def config_clash(ckpt: Checkpoint) -> list[Difference]:
    """How the checkpoint's config describes another model, figure by figure ([] where it does
    not): --verify's comparison, made where config_fit's fast accept does not accept."""
    from hccli.checkpoint.verify.config_fit import fits

    if fits(ckpt):
        return []
    from hccli.checkpoint.verify.causes import mismatch_differences
    from hccli.checkpoint.verify.facts import GoneShards

    return mismatch_differences(ckpt, GoneShards(ckpt))


def contradicts(diffs: list[Difference]) -> bool:
    """Whether the differences contradict the headers (another family, hc_mult or dim; more
    layers or stages than the config has), rather than tell only of layers or stages the
    checkpoint lacks: a config of the model it was cut from (its MTP stages dropped, say)
    still numbers its layers and gives its settings."""
    return any(d.what not in ("layers", "stages") or d.b > d.a for d in diffs)


def set_aside(cfg: ModelConfig, words: str) -> tuple[ConfigUnusable, Finding]:
    """(the note that sets a config.json found beside the checkpoint aside, the finding worded
    as the note): another model's config is not used, as one that cannot be read is not."""
    from hccli.checkpoint.verify.causes import DIFFERENT, FIGURES, mismatch_finding

    said = f"config.json not used: {cfg.source}: {DIFFERENT}: {words} ({FIGURES})"
    line = one_line(f"{said}; used instead of all its values: {USED_INSTEAD}", 1000)
    return ConfigUnusable(cfg.source, "", SET_ASIDE_EXPECTED, words, USED_INSTEAD, line), mismatch_finding(said)
