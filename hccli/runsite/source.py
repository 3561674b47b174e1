"""What `hc run-site` runs: a model's HC sites and their tensors, from a checkpoint in any dialect
`hc` reads (through hc_view.open_view: the opener and HC value readers `hc diff` uses), or
from a config.json with sample values (synth.hc_values, as `hc make-checkpoint` writes them).
Also the streams and sub-layer outputs a run starts from. Nothing here prints.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from hccli.model.config.model import ConfigUnusable
from hccli.base.errors import HcError
from hccli.base.limits import MAX_ELEMENTS
from hccli.ops.site import FAMILY_NORM_EPS, SiteParams, SiteRef, cast, plan_sites, sample_sublayer, token_rms
from hccli.base.vocab import hc_tensor_name, mix_width

# Values in one streams array (tokens x hc x dim), one mixes (tokens x (2+hc)*hc) and one fn:
# 4M float32 (16 MB), 204 tokens of V4.1-Flash; the run holds a few such arrays at a time. The
# kernel readers' bound (runkernel/files.py), so every array of a run reads back from its golden.
MAX_STREAM_VALUES = MAX_ELEMENTS


@dataclass(frozen=True)
class SiteModel:
    label: str
    kind: str  # "checkpoint" | "config"
    dialect: str
    params: SiteParams  # streams_dtype as the model's (bf16); a streams file may say f32
    origin: str  # where family, hc_mult, iterations, eps and norm_eps came from
    dim: int
    n_layers: int
    n_stages: int
    plan: tuple[SiteRef, ...]
    protect: str | None  # protected(source): nothing is written inside it
    read: Callable[[SiteRef], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(repr=False)
    notes: tuple[str, ...] = ()
    config_note: ConfigUnusable | None = None  # the config.json beside the checkpoint, set aside

    def tensors(self, ref: SiteRef) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fn, base, scale) of a site, float32, in the release's shapes (checked)."""
        fn, base, scale = self.read(ref)
        hc = self.params.hc_mult
        rows = mix_width(hc) if ref.site != "head" else hc
        want = ((rows, hc * self.dim), (rows,), (3,) if ref.site != "head" else (1,))
        for part, a, shape in zip(("fn", "base", "scale"), (fn, base, scale), want):
            if tuple(a.shape) != shape:
                raise HcError(f"{self.label}: tensor '{hc_tensor_name(ref.owner, ref.site, part)}' has shape "
                              f"{list(a.shape)}; expected {list(shape)} (hc_mult {hc}, dim {self.dim})")
        return fn, base, scale


def _is_config(p: Path) -> bool:
    return p.suffix.lower() == ".json" and p.is_file()


# Names only a checkpoint directory holds (an index, a shard, a GGUF), and the entries of a
# config's folder looked at for them: past these the folder is taken for a checkpoint.
_CHECKPOINT_FILE = re.compile(r"(model(-[0-9]+-of-[0-9]+)?\.safetensors|model\.safetensors\.index\.json|.+\.gguf)",
                              re.ASCII)
_MAX_LOOKED_AT = 4096


def protected(source: str) -> str | None:
    """What nothing may be written into (safe_write's `forbidden`) for this source: a checkpoint on
    disk; for a config.json, its folder only where that folder is a checkpoint's (a config kept
    beside one's golden files protects nothing); None for a hub name."""
    p = Path(source)
    if not _is_config(p):
        return source if p.exists() else None
    folder = p.parent
    try:
        with os.scandir(folder) as entries:
            for i, e in enumerate(entries):
                if i >= _MAX_LOOKED_AT or _CHECKPOINT_FILE.fullmatch(e.name):
                    return str(folder)
    except OSError:
        return str(folder)  # a folder that cannot be listed cannot be told apart: it is kept safe
    return None


def open_model(source: str, config: str | Path | None = None, seed: int = 0) -> SiteModel:
    """A checkpoint (any dialect, local or hf://), or a config.json whose sites get sample values."""
    p = Path(source)
    if _is_config(p):
        if config is not None:
            raise HcError(f"{source} is a config already; --config names the config of a checkpoint")
        return _from_config(p, seed)
    return _from_checkpoint(source, config)


def _from_config(path: Path, seed: int) -> SiteModel:
    from hccli.model.config.model import load_config
    from hccli.model.inventory import build_hc_inventory
    from hccli.checkpoint.synth import hc_values

    cfg = load_config(path)
    specs = {t.name: (i, t) for i, t in enumerate(build_hc_inventory(cfg))}
    plan = plan_sites(cfg.family, cfg.n_layers, cfg.n_stages, cfg.n_stages, cfg.has_head_mix,
                      cfg.has_head_mix and cfg.n_stages > 0)

    def read(ref: SiteRef):
        out = []
        for part in ("fn", "base", "scale"):
            i, t = specs[hc_tensor_name(ref.owner, ref.site, part)]
            out.append(hc_values(cfg, t, np.random.default_rng([seed, i])))
        return tuple(out)

    params = SiteParams(cfg.family, cfg.hc_mult, cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.norm_eps)
    return SiteModel(f"{path} (sample values, seed {seed})", "config", "config", params, f"config {path}",
                     cfg.dim, cfg.n_layers, cfg.n_stages, plan, protected(str(path)), read)


def _from_checkpoint(source: str, config: str | Path | None) -> SiteModel:
    from hccli.checkpoint.view import open_view

    view = open_view(source, config)
    hc, dim, n_layers = view.model.hc_mult, view.model.dim, view.model.n_layers
    if not view.hc or not hc or not dim or n_layers is None:
        raise HcError(f"{view.label}: no hyper-connection sites whose hc_mult and dim can be told "
                      f"(dialect {view.dialect.dialect}); expected a DeepSeek-V4-family checkpoint")
    family = "v4" if "hc_head_fn" in view.hc else "v4.1"
    notes = []
    norm_eps, eps_from = view.norm_eps, view.model.source
    if view.model.source == "tensor shapes" or (view.kind == "gguf" and not _gguf_says_norm_eps(source)):
        norm_eps, eps_from = FAMILY_NORM_EPS[family], f"the {family} default (not in the {view.model.source})"

    def need(owner: str, site: str) -> bool:
        missing = [hc_tensor_name(owner, site, p) for p in ("fn", "base", "scale")
                   if hc_tensor_name(owner, site, p) not in view.hc]
        if len(missing) == 3:
            return False
        if missing:
            raise HcError(f"{view.label}: tensor '{missing[0]}' is missing; run-site needs each site's fn, base "
                          "and scale")
        return True

    for layer in range(n_layers):
        for site in ("attn", "ffn"):
            if not need(f"layers.{layer}", site):
                raise HcError(f"{view.label}: tensor '{hc_tensor_name(f'layers.{layer}', site, 'fn')}' is missing; "
                              f"run-site needs every backbone site of the {n_layers} layers")
    stages = 0
    while need(f"mtp.{stages}", "attn") and need(f"mtp.{stages}", "ffn"):
        stages += 1
    if view.n_stages > stages:
        notes.append(f"the config names {view.n_stages} DSpark/MTP stage(s); the checkpoint holds the HC tensors "
                     f"of {stages}: the stages run without the rest")
    stage_head = stages > 0 and need(f"mtp.{stages - 1}", "head")
    plan = plan_sites(family, n_layers, view.n_stages, stages, family == "v4", stage_head)

    def read(ref: SiteRef):
        out = []
        for part in ("fn", "base", "scale"):
            t = view.hc[hc_tensor_name(ref.owner, ref.site, part)]
            out.append(t.read(MAX_STREAM_VALUES))
        return tuple(out)

    params = SiteParams(family, hc, view.iters, view.eps, norm_eps)
    origin = (f"family {family} ({'a head mix' if family == 'v4' else 'no head mix'} in the checkpoint); "
              f"hc_mult, iterations, eps from {view.model.source}; norm_eps {norm_eps:g} from {eps_from}")
    return SiteModel(view.label, "checkpoint", view.dialect.dialect, params, origin, dim, n_layers, view.n_stages,
                     plan, protected(source), read, tuple(notes), view.config_note)


def _gguf_says_norm_eps(source: str) -> bool:
    """Whether a GGUF's metadata holds the RMS statistic's eps (else hc_view took a default)."""
    from hccli.checkpoint.hc import gguf_settings
    from hccli.checkpoint.opening import open_checkpoint

    return "attention.layer_norm_rms_epsilon" in gguf_settings(open_checkpoint(source))


# ---- what a run starts from -------------------------------------------------------------------

def check_fn(label: str, hc: int, dim: int) -> None:
    """A site's fn [(2+hc)*hc, hc*dim] within MAX_STREAM_VALUES, before any is read or made."""
    rows, cols = mix_width(hc), hc * dim
    if rows * cols > MAX_STREAM_VALUES:
        raise HcError(f"{label}: hc_mult {hc}, dim {dim:,}: each site's fn is [{rows:,}, {cols:,}], "
                      f"{rows * cols:,} values; hc runs at most {MAX_STREAM_VALUES:,} "
                      "(site_source.MAX_STREAM_VALUES)")


def check_tokens(tokens: int, hc: int, dim: int) -> None:
    """The streams [tokens, hc, dim] and mixes [tokens, (2+hc)*hc] within MAX_STREAM_VALUES."""
    width = max(hc * dim, mix_width(hc))
    if tokens * width > MAX_STREAM_VALUES:
        what = f"{hc} streams x {dim:,}" if width == hc * dim else f"{width:,} mixes"
        raise HcError(f"{tokens:,} tokens x {what}: {tokens * width:,} values; hc runs at most "
                      f"{MAX_STREAM_VALUES:,} (site_source.MAX_STREAM_VALUES): at most "
                      f"{MAX_STREAM_VALUES // width:,} tokens for this model")


def read_streams(path: Path, hc: int, dim: int) -> tuple[np.ndarray, str, str]:
    """(streams [T, hc, dim] float32, their dtype "bf16" | "f32", what they are) from a .safetensors
    file (tensor `streams`, BF16 or F32) or a .npy array of float32."""
    from hccli.runkernel.files import load_float_array

    path = Path(path)
    if path.suffix.lower() not in (".safetensors", ".npy"):
        raise HcError(f"{path}: expected a .safetensors file (tensor `streams`, BF16 or F32) or a float32 .npy")
    array, what = load_float_array(path, "streams")
    dtype = {"tensor `streams` BF16": "bf16", "tensor `streams` F32": "f32", "array float32": "f32"}.get(what)
    if dtype is None:
        raise HcError(f"{path}: {what}; expected the streams in BF16 or F32 (the model's streams are bf16)")
    if array.ndim != 3 or array.shape[1:] != (hc, dim) or array.shape[0] < 1:
        raise HcError(f"{path}: {what} has shape {list(array.shape)}; expected [tokens, {hc}, {dim}]")
    check_tokens(array.shape[0], hc, dim)
    return np.ascontiguousarray(array, dtype=np.float32), dtype, f"file {path} ({what} {list(array.shape)})"


def sublayer_outputs(how: str, plan: tuple[SiteRef, ...], seed: int, streams: np.ndarray, streams_dtype: str
                     ) -> tuple[Callable[[SiteRef], np.ndarray], str]:
    """(f of a site, what f is): zero, seeded (scaled per token like the streams the run starts
    from), or read from a .safetensors file holding `{layer}.{site}.f` per site or one `f` for all."""
    tokens, dim = streams.shape[0], streams.shape[2]
    if how == "zero":
        return (lambda ref: np.zeros((tokens, dim), np.float32)), "zero (pure stream mixing)"
    if how == "random":
        scale = token_rms(streams)

        def seeded(ref: SiteRef) -> np.ndarray:
            return cast(sample_sublayer(seed, plan.index(ref), tokens, dim, scale), streams_dtype)
        return seeded, f"random: N(0, 1) times each token's stream RMS, seed {seed}"
    return _sublayer_file(Path(how), plan, tokens, dim, streams_dtype)


def _sublayer_file(path: Path, plan, tokens: int, dim: int, streams_dtype: str):
    from hccli.runkernel.files import read_safetensors_header, read_safetensors_tensors
    from hccli.runsite.golden import MAX_GOLDEN_VALUES

    if path.suffix.lower() != ".safetensors":
        raise HcError(f"--sublayer {path}: expected zero, random or a .safetensors file of sub-layer outputs")
    source, header = read_safetensors_header(path)
    source.close()
    count = sum(math.prod(t.shape) for t in header.by_name.values())
    if count > MAX_GOLDEN_VALUES:
        raise HcError(f"{path}: its tensors hold {count:,} values; hc reads at most {MAX_GOLDEN_VALUES:,}")
    names = tuple(f"{r.key}.f" for r in plan if r.site != "head")
    found = {k: a for k, (a, _) in read_safetensors_tensors(path, (), optional=names + ("f",)).items()}
    for k, a in found.items():
        if a.shape != (tokens, dim):
            raise HcError(f"{path}: tensor `{k}` has shape {list(a.shape)}; expected [{tokens}, {dim}]")

    def read(ref: SiteRef) -> np.ndarray:
        a = found.get(f"{ref.key}.f", found.get("f"))
        if a is None:
            raise HcError(f"{path}: no tensor `{ref.key}.f` (nor one `f` for every site); expected the sub-layer "
                          f"output [{tokens}, {dim}] of site {ref.key}")
        return cast(np.asarray(a, dtype=np.float32), streams_dtype)

    return read, f"file {path}"
