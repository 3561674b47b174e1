"""`hc run-kernel`'s core: gather the input and the op's parameters from where the
user pointed, run the chosen implementation, and summarise. No printing here.

Where hc_mult, the iteration count and eps come from, in order: a checkpoint's
config.json; a --config; the tensors' shapes with the reference defaults (20
iterations, eps 1e-6); the command's options. The result says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hccli.errors import HcError
from hccli.kernels import inputs
from hccli.vocab import mix_width

DEFAULT_ITERS = 20
DEFAULT_EPS = 1e-6


@dataclass(frozen=True)
class RunParams:
    hc_mult: int
    iters: int
    eps: float
    norm_eps: float
    origin: str  # where hc_mult/iters/eps came from


@dataclass(frozen=True)
class RunInput:
    mixes: np.ndarray  # float32 [..., (2+hc)*hc]
    scale: np.ndarray  # [3]
    base: np.ndarray  # [(2+hc)*hc]
    provenance: str
    params_provenance: str  # where base/scale came from
    nonfinite_tokens: tuple[int, ...]
    params: RunParams


@dataclass(frozen=True)
class RunResult:
    impl: str
    device: str
    reason: str
    input: RunInput
    pre: np.ndarray  # [n, hc] float32, leading dims flattened row-major
    post: np.ndarray
    comb: np.ndarray  # [n, hc, hc]

    @property
    def tokens(self) -> int:
        return int(self.pre.shape[0])

    def deviations(self) -> tuple[float, float]:
        """Largest |row sum - 1| and |column sum - 1| over the finite tokens."""
        ok = np.isfinite(self.comb).all(axis=(1, 2))
        if not ok.any():
            return float("nan"), float("nan")
        c = self.comb[ok].astype(np.float64)
        return float(np.abs(c.sum(-1) - 1).max()), float(np.abs(c.sum(-2) - 1).max())

    def to_json(self) -> dict[str, Any]:
        row, col = self.deviations()
        p = self.input.params
        return {
            "impl": self.impl,
            "device": self.device,
            "reason": self.reason,
            "tokens": self.tokens,
            "input": self.input.provenance,
            "params": {"hc_mult": p.hc_mult, "sinkhorn_iters": p.iters, "eps": p.eps, "origin": p.origin,
                       "base_scale": self.input.params_provenance,
                       "hc_scale": self.input.scale.tolist(), "hc_base": self.input.base.tolist()},
            "nonfinite_tokens": list(self.input.nonfinite_tokens),
            "max_abs_row_sum_dev": row,
            "max_abs_col_sum_dev": col,
            "pre": self.pre.tolist(),
            "post": self.post.tolist(),
            "comb": self.comb.tolist(),
        }


def _params_from_config(path: Path, what: str) -> RunParams:
    from hccli.config import load_config

    cfg = load_config(path)
    return RunParams(cfg.hc_mult, cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.norm_eps, f"{what} {path}")


def gather(
    *,
    tokens: int | None = None,
    seed: int = 0,
    mixes_file: Path | None = None,
    checkpoint: str | Path | None = None,
    layer: int | None = None,
    site: str = "attn",
    hidden: bool = False,
    hidden_file: Path | None = None,
    dim: int | None = None,
    config: Path | None = None,
    hc_mult: int | None = None,
    iters: int | None = None,
    eps: float | None = None,
) -> RunInput:
    """Work out mixes, base, scale and the op's parameters from the options."""
    if mixes_file is not None and (hidden or hidden_file is not None):
        raise HcError("--mixes and --hidden are two sources of mixes; give one")
    if tokens is not None and mixes_file is not None:
        raise HcError("--tokens makes random mixes and --mixes reads them from a file; give one")
    if checkpoint is None and layer is not None:
        raise HcError("--layer needs --checkpoint (the layer whose hc_base and hc_scale to use)")
    if checkpoint is not None and layer is None:
        raise HcError(f"--checkpoint {checkpoint}: also give --layer L (and --site attn|ffn)")
    if site not in ("attn", "ffn"):
        raise HcError(f"--site {site!r}: the split-Sinkhorn op runs at the attn and ffn sites "
                      "(the head mix has no Sinkhorn); expected attn or ffn")

    # parameters of the op
    params: RunParams | None = None
    base = scale = fn = None
    base_origin = ""
    if config is not None:
        params = _params_from_config(config, "--config")
    if checkpoint is not None:
        from hccli.checkpoint.hc import hc_from_mix_width, read_base_scale, read_part, select_site
        from hccli.checkpoint.shardset import open_checkpoint

        ckpt = open_checkpoint(checkpoint, config=config)
        s = select_site(ckpt, layer, site)
        base, scale = (a.reshape(-1) for a in read_base_scale(ckpt, s))
        base_origin = f"hc_{site}_base/scale of {s.name} (layer {layer}) in {checkpoint}"
        if hidden or hidden_file is not None:
            fn = read_part(ckpt, s, "fn")
        if ckpt.config is not None and params is None:
            c = ckpt.config
            params = RunParams(c.hc_mult, c.hc_sinkhorn_iters, c.hc_eps, c.norm_eps, f"config {c.source}")
        elif params is None:
            hc = hc_from_mix_width(base.size)
            if hc is None or scale.size != 3:
                raise HcError(f"{checkpoint}: hc_{site}_base of {s.name} has {base.size} values and scale "
                              f"{scale.size}; expected (2+hc)*hc and 3")
            params = RunParams(hc, DEFAULT_ITERS, DEFAULT_EPS, 1e-6,
                               f"the tensors' shapes (hc_mult {hc}; no config.json: reference defaults "
                               f"{DEFAULT_ITERS} iterations, eps {DEFAULT_EPS:g})")
    if params is None:
        params = RunParams(4, DEFAULT_ITERS, DEFAULT_EPS, 1e-6,
                           f"reference defaults (hc_mult 4, {DEFAULT_ITERS} iterations, eps {DEFAULT_EPS:g})")
    # explicit options override what was found, and say so
    overrides = [f"{k} {v}" for k, v in (("hc_mult", hc_mult), ("iterations", iters), ("eps", eps)) if v is not None]
    if hc_mult is not None and base is not None and hc_mult != params.hc_mult:
        raise HcError(f"--hc-mult {hc_mult} disagrees with the checkpoint's hc_mult {params.hc_mult}")
    if overrides:
        params = RunParams(hc_mult or params.hc_mult, iters if iters is not None else params.iters,
                           eps if eps is not None else params.eps, params.norm_eps,
                           params.origin + "; " + ", ".join(overrides) + " from the options")
    hc = params.hc_mult
    if params.iters < 1:
        raise HcError(f"--iters {params.iters}: expected at least 1 Sinkhorn iteration")
    if not np.isfinite(params.eps) or params.eps < 0:
        raise HcError(f"--eps {params.eps}: expected a finite number >= 0")

    # the mixes
    if hidden or hidden_file is not None:
        fn_origin = f"hc_{site}_fn of {checkpoint}" if fn is not None else ""
        src = inputs.hidden_mixes(tokens or inputs.SAMPLE_TOKENS, dim or inputs.SAMPLE_DIM, seed, hc, hidden_file,
                                  params.norm_eps, fn=fn, fn_origin=fn_origin)
    elif mixes_file is not None:
        src = inputs.load_mixes(mixes_file, hc)
    elif tokens is not None:
        src = inputs.random_mixes(tokens, seed, hc)
    else:
        src = inputs.sample_mixes(hc)

    if src.mixes.shape[-1] != mix_width(hc):
        raise HcError(f"mixes have last dimension {src.mixes.shape[-1]}; expected (2+hc)*hc = {mix_width(hc)}")
    if base is None:
        if src.hc_base is not None:
            base, scale = src.hc_base, src.hc_scale
            base_origin = "the sample's synthetic base/scale (comb offsets 2 on the diagonal, scales 1)"
        else:
            scale, base = inputs.sample_params(hc)
            base_origin = ("synthetic base/scale (comb offsets 2 on the diagonal, scales 1); "
                           "--checkpoint PATH --layer L takes a model's own")
    return RunInput(src.mixes, np.asarray(scale, np.float32), np.asarray(base, np.float32), src.provenance,
                    base_origin, src.nonfinite_tokens, params)


def run(inp: RunInput, impl: str = "auto", device: str | None = None) -> RunResult:
    from hccli.kernels.registry import resolve_impl

    chosen = resolve_impl(impl, device, inp.params.hc_mult)
    p = inp.params
    pre, post, comb = chosen.run(inp.mixes, inp.scale, inp.base, p.hc_mult, p.iters, p.eps)
    hc = p.hc_mult
    return RunResult(
        chosen.name, chosen.device, chosen.reason, inp,
        pre.reshape(-1, hc).float().cpu().numpy(),
        post.reshape(-1, hc).float().cpu().numpy(),
        comb.reshape(-1, hc, hc).float().cpu().numpy(),
    )


def check_save_path(path: Path, *, force: bool = False, protect: Path | None = None) -> None:
    """Refuse a --save target before any work is done."""
    path = Path(path)
    if protect is not None:
        root = protect if protect.is_dir() else protect.parent
        try:
            path.resolve().relative_to(root.resolve())
            raise HcError(f"--save {path}: inside the checkpoint directory {root}; hc never writes there")
        except ValueError:
            pass
    if path.exists() and not force:
        raise HcError(f"--save {path}: file exists; expected a new file (or pass --force)")
    if path.suffix != ".safetensors":
        raise HcError(f"--save {path}: expected a .safetensors file name")
    if not path.parent.is_dir():
        raise HcError(f"--save {path}: no directory {path.parent}")


def save_golden(result: RunResult, path: Path) -> None:
    """Inputs and outputs as golden vectors for ports: one .safetensors file."""
    from safetensors.numpy import save_file

    path = Path(path)
    inp = result.input
    p = inp.params
    tensors = {
        "mixes": np.ascontiguousarray(inp.mixes.reshape(-1, inp.mixes.shape[-1]), dtype=np.float32),
        "hc_scale": inp.scale.astype(np.float32), "hc_base": inp.base.astype(np.float32),
        "pre": result.pre, "post": result.post, "comb": result.comb,
    }
    meta = {"impl": result.impl, "device": result.device, "hc_mult": str(p.hc_mult),
            "sinkhorn_iters": str(p.iters), "eps": repr(p.eps), "input": inp.provenance,
            "base_scale": inp.params_provenance, "producer": "hccli run-kernel"}
    tmp = path.with_name(path.name + ".partial")
    try:
        save_file(tensors, str(tmp), metadata=meta)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise HcError(f"--save {path}: cannot write ({exc.strerror or exc})") from None
