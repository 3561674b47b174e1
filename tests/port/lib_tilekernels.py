"""A port of the HC site made of DeepSeek TileKernels' torch reference ops (tile_kernels/torch/mhc.py,
tile-kernels 1.0.0), composed as a porter composes them: `mhc_pre_norm_fn_ref` (the projection and
its RMS factor), `mhc_pre_split_mixes_ref` (pre, post and the comb logits), `sinkhorn_normalize_ref`,
`mhc_pre_apply_mix_ref` (the collapse) and `mhc_post_ref` (the write-back), with the model's
settings passed where the functions have defaults of their own (sinkhorn repeat 20, post_mult 2).

The file is loaded by its path: the package's __init__ imports its tilelang kernels, which need
CUDA. It is found where pip installed tile-kernels (the test extra pins it; CI installs it); a
test skips, saying so, where it is not.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from hccli.runsite.golden import SiteGolden

VERSION = "1.0.0"


@functools.lru_cache(maxsize=1)
def _load():
    spec = importlib.util.find_spec("tile_kernels")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "torch" / "mhc.py"
    if not path.is_file():
        return None
    s = importlib.util.spec_from_file_location("tile_kernels_torch_mhc", path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return mod


def mhc():
    pytest.importorskip("torch")
    mod = _load()
    if mod is None:
        pytest.skip(f"tile-kernels is not installed (pip install --no-deps tile-kernels=={VERSION}; the test extra "
                    "pins it): its torch reference tile_kernels/torch/mhc.py is read by path")
    return mod


def port(golden: SiteGolden, chained: bool = False, repeat: int | None = None, post_mult: float = 2.0,
         eps: float | None = None, dtype=None) -> dict[str, np.ndarray]:
    """The port's tensors for the golden's inputs. repeat, post_mult and eps are what the porter
    passes (None: the golden's); dtype, where given, the dtype fn, base and scale are held in."""
    import torch

    m = mhc()
    p = golden.params
    repeat = p.iters if repeat is None else repeat
    eps = p.hc_eps if eps is None else eps
    hc = p.hc_mult
    out: dict[str, np.ndarray] = {}
    x = pre_mix = None

    def t(a, dt=torch.float32):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(dt)[None]

    for gs in golden.sites:
        i, k = gs.inputs, gs.ref.key
        if x is None or not chained:
            x = t(i.streams, torch.bfloat16)
            pre_mix = None if i.pre_mix is None else t(i.pre_mix)
        out[f"{k}.streams_in"] = x[0].float().numpy()
        if i.pre_mix is not None:
            out[f"{k}.pre_mix_in"] = pre_mix[0].numpy()
        if i.fn is None:  # V4.1's end of a stack: the last pre collapses the streams
            out[f"{k}.collapsed"] = m.mhc_pre_apply_mix_ref(x, pre_mix.unsqueeze(-1))[0].float().numpy()
            continue
        held = torch.float32 if dtype is None else dtype
        fn, base, scale = (torch.from_numpy(a.astype(np.float32)).to(held) for a in (i.fn, i.base, i.scale))
        mixes = m.mhc_pre_norm_fn_ref(x, fn.float(), None, p.norm_eps)
        out[f"{k}.mixes"] = mixes[0].numpy()
        if gs.ref.site == "head":
            pre = m.mhc_head_compute_mix_ref(mixes, scale, base, eps)
            out[f"{k}.pre"] = pre[0].numpy()
            out[f"{k}.collapsed"] = m.mhc_pre_apply_mix_ref(x, pre.unsqueeze(-1))[0].float().numpy()
            continue
        pre, post, logits = m.mhc_pre_split_mixes_ref(mixes, scale, base, hc, post_mult, eps)
        comb = m.sinkhorn_normalize_ref(logits, repeat, eps)
        weights = pre if pre_mix is None else pre_mix.unsqueeze(-1)
        collapsed = m.mhc_pre_apply_mix_ref(x, weights)
        f = t(i.f, torch.bfloat16)
        y = m.mhc_post_ref(f, x, post, comb)
        for name, a in (("pre", pre[..., 0]), ("post", post[..., 0]), ("comb", comb), ("collapsed", collapsed),
                        ("streams_out", y)):
            out[f"{k}.{name}"] = a[0].float().numpy()
        x, pre_mix = y, (pre[..., 0] if pre_mix is not None else None)
    return out
