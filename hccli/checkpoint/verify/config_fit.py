"""Whether a checkpoint's config fits its HC sites: the fast accept in front of --verify's one
comparison (causes.mismatch_words, model_shape.differences over every name).

The figures the HC sites found at opening give (hc_mult and dim from the first attn/ffn site's
fn, [(2+hc)*hc, hc*dim]; the backbone layers and stages they are found at; a root head mix)
are held to the config's, each only where the checkpoint's layout can say it. Where all agree
the config is the checkpoint's, at the cost of a look at a few hundred sites; where one differs,
the careful comparison decides (layers whose HC tensors a gone shard held are still the model's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hccli.names import dialects as D
from hccli.base.vocab import HcName, hc_from_mix_width

if TYPE_CHECKING:
    from hccli.checkpoint.shardset import Checkpoint

HEAD_FN = HcName("", None, "head", "fn")  # the root head mix, where a layout can spell one
STAGES_HELD = (D.RELEASE, D.RELEASE_PREFIXED)  # the layouts that can hold DSpark/MTP stages


def fits(ckpt: Checkpoint) -> bool:
    """Whether every figure the HC sites give equals the config's (True without a config)."""
    cfg = ckpt.config
    if cfg is None:
        return True
    fn = None
    layers = stages = -1
    head = False
    for s in ckpt.hc_sites:
        if not s.owner:
            head = True
        elif s.is_stage:
            stages = max(stages, int(s.owner.rpartition(".")[2]))
        else:
            layers = max(layers, int(s.owner.rpartition(".")[2]))
        if fn is None and s.site != "head" and "fn" in s.parts and len(s.parts["fn"][1].shape) == 2:
            fn = s.parts["fn"][1].shape
    hc = hc_from_mix_width(fn[0]) if fn else None
    dim = fn[1] // hc if fn and hc and fn[1] % hc == 0 else None
    dialect = ckpt.dialect.dialect
    return ((hc is None or hc == cfg.hc_mult) and (dim is None or dim == cfg.dim)
            and (layers < 0 or layers + 1 == cfg.n_layers)
            and (dialect not in STAGES_HELD or stages + 1 == cfg.n_stages)
            and (D.spell_hc(HEAD_FN, dialect) is None or ("v4" if head else "v4.1") == cfg.family))
