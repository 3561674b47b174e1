"""A port of the HC site made of mlx-lm's own code (models/deepseek_v41, V4.1), on mlx's CPU build:
each golden layer runs through a real `DecoderLayer`, its `attn_hc` and `ffn_hc` the model's
`HyperConnection`s holding the golden's fn, base and scale, its collapse and write-back the
module's `_collapse` and `_expand`. The sub-layers are outside the site: the attention and the
MoE are replaced by modules that return the golden's f (bf16, as the model's sub-layers return
it) and the layer norms before them by the identity, so the attention receives collapsed.

mlx-lm hands out pre, post and comb (it computes no mixes of its own: the affine step is fused
into the projection's result); the port writes those, collapsed (what the attention received),
streams_out, and the streams_in and pre_mix_in it used (chained: its own of the site before).
"""

from __future__ import annotations

import numpy as np
import pytest
from mlx_fixtures import release_config

from hccli.runsite.golden import SiteGolden


def modules():
    pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'mlx[cpu]' mlx-lm; Linux, macOS)")
    mx = pytest.importorskip("mlx.core")
    nn = pytest.importorskip("mlx.nn")
    v41 = pytest.importorskip("mlx_lm.models.deepseek_v41", reason="mlx-lm has no deepseek_v41 (mlx-lm>=0.32.2)")
    return mx, nn, v41


def _np(a) -> np.ndarray:
    mx, _, _ = modules()
    return np.array(a.astype(mx.float32))


def port(golden: SiteGolden, chained: bool = False, prepare=None) -> dict[str, np.ndarray]:
    """The port's tensors for the golden's inputs. prepare(layer) may change a layer before it runs;
    the caller's monkeypatch edits the module's functions."""
    mx, nn, v41 = modules()
    args = v41.ModelArgs.from_dict(release_config())
    assert args.hc_eps == golden.params.hc_eps and args.rms_norm_eps == golden.params.norm_eps

    class Sublayer(nn.Module):
        def __init__(self):
            super().__init__()
            self._f, self._seen = None, None

        def __call__(self, x, **kwargs):
            self._seen = x
            return self._f

    class Recorder(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self._got = inner, None

        def __call__(self, streams):
            r = self.inner(streams)
            self._got = (streams, *r)
            return r

    bf16 = mx.bfloat16
    sites = {gs.ref.key: gs for gs in golden.sites}
    out: dict[str, np.ndarray] = {}
    x = pre_mix = None
    for gs in golden.sites:
        if gs.ref.site != "attn":
            continue
        ffn = sites[f"{gs.ref.layer}.ffn"]
        layer = v41.DecoderLayer(args, gs.ref.layer)
        layer.self_attn, layer.mlp = Sublayer(), Sublayer()
        layer.input_layernorm = layer.post_attention_layernorm = nn.Identity()
        for hc, s in ((layer.attn_hc, gs), (layer.ffn_hc, ffn)):
            hc.fn, hc.base, hc.scale = (mx.array(a.astype(np.float32)) for a in (s.inputs.fn, s.inputs.base,
                                                                                  s.inputs.scale))
        if prepare is not None:
            prepare(layer)
        layer.attn_hc, layer.ffn_hc = Recorder(layer.attn_hc), Recorder(layer.ffn_hc)
        layer.self_attn._f = mx.array(gs.inputs.f)[None].astype(bf16)
        layer.mlp._f = mx.array(ffn.inputs.f)[None].astype(bf16)
        if x is None or not chained:
            x = mx.array(gs.inputs.streams)[None].astype(bf16)
            pre_mix = mx.array(gs.inputs.pre_mix)[None]
        y, ffn_pre = layer(x, pre_mix, start_pos=0, window_idx=None, cache=None, shared={})
        mx.eval(y, ffn_pre)
        for key, rec, sub, mix_in in ((gs.ref.key, layer.attn_hc, layer.self_attn, pre_mix),
                                      (ffn.ref.key, layer.ffn_hc, layer.mlp, layer.attn_hc._got[1])):
            streams_in, pre, post, comb = rec._got
            out[f"{key}.streams_in"] = _np(streams_in[0])
            out[f"{key}.pre_mix_in"] = _np(mix_in[0])
            out[f"{key}.pre"], out[f"{key}.post"], out[f"{key}.comb"] = _np(pre[0]), _np(post[0]), _np(comb[0])
            out[f"{key}.collapsed"] = _np(sub._seen[0])
        out[f"{gs.ref.key}.streams_out"] = _np(layer.ffn_hc._got[0][0])
        out[f"{ffn.ref.key}.streams_out"] = _np(y[0])
        x, pre_mix = y, ffn_pre
    for gs in golden.sites:
        if gs.ref.site == "head":  # V4.1's end of the stack: TextModel's last line, _collapse(streams, pre_mix)
            if x is None or not chained:
                x, pre_mix = mx.array(gs.inputs.streams)[None].astype(bf16), mx.array(gs.inputs.pre_mix)[None]
            out[f"{gs.ref.key}.streams_in"], out[f"{gs.ref.key}.pre_mix_in"] = _np(x[0]), _np(pre_mix[0])
            out[f"{gs.ref.key}.collapsed"] = _np(v41._collapse(x, pre_mix)[0])
    return out
