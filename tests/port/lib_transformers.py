"""A port of the HC site made of transformers' own modules (modeling_deepseek_v4, V4): each golden
layer runs through a real `DeepseekV4DecoderLayer` whose `attn_hc` and `ffn_hc` are
`DeepseekV4HyperConnection`s holding the golden's fn, base and scale, and the golden's head
through `DeepseekV4HyperHead`. The sub-layers are outside the site: the attention and the MoE
are replaced by modules that return the golden's f (in the streams' dtype, as the model's
sub-layers return it), and the layer norms before them by the identity, so that what the
attention receives is the site's collapsed.

The port writes what transformers hands out: post, comb and collapsed from the HC module's
return (pre is consumed inside it), streams_out from the layer, and the streams_in it used
(chained: its own output of the site before; else the golden's).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers_fixtures import hub_config, transformers_config

from hccli.runsite.golden import SiteGolden

CONFIG = "tiny-v4.hf.json"


def modeling():
    tf = pytest.importorskip("transformers")
    if not hasattr(tf, "DeepseekV4Config"):
        pytest.skip("this transformers has no DeepseekV4 model")
    from transformers.models.deepseek_v4 import modeling_deepseek_v4

    return modeling_deepseek_v4


class _Sublayer(torch.nn.Module):
    """Returns the golden's f, recording its input (the site's collapsed)."""

    def __init__(self, attention: bool):
        super().__init__()
        self.attention, self.f, self.seen = attention, None, None

    def forward(self, x, *args, **kwargs):
        self.seen = x.detach().float().clone()
        return (self.f, None) if self.attention else self.f


def _t(a: np.ndarray, dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(dtype)


def _load(hc, fn, base, scale) -> None:
    with torch.no_grad():
        dt = hc.fn.dtype  # the module's own dtype: float32 as transformers keeps it, or a cast module's
        hc.fn.copy_(_t(fn, dt))
        hc.base.copy_(_t(base, dt))
        hc.scale.copy_(_t(scale, dt))


def port(golden: SiteGolden, chained: bool = False, dtype=torch.bfloat16, prepare=None) -> dict[str, np.ndarray]:
    """The port's tensors for the golden's inputs. prepare(layer) may change a layer before it runs
    (a mistake: a cast module, another hc_eps); the caller's monkeypatch edits the classes."""
    m = modeling()
    config = transformers_config(hub_config(CONFIG))
    assert config.hc_eps == golden.params.hc_eps and config.rms_norm_eps == golden.params.norm_eps
    sites = {gs.ref.key: gs for gs in golden.sites}
    out: dict[str, np.ndarray] = {}
    x = None
    for gs in golden.sites:
        if gs.ref.site != "attn":
            continue
        layer_no = gs.ref.layer
        ffn = sites[f"{layer_no}.ffn"]
        layer = m.DeepseekV4DecoderLayer(config, layer_no)
        layer.self_attn, layer.mlp = _Sublayer(True), _Sublayer(False)
        layer.input_layernorm = layer.post_attention_layernorm = torch.nn.Identity()
        for hc, s in ((layer.attn_hc, gs), (layer.ffn_hc, ffn)):
            _load(hc, s.inputs.fn, s.inputs.base, s.inputs.scale)
        if prepare is not None:
            prepare(layer)
        layer.self_attn.f, layer.mlp.f = _t(gs.inputs.f, dtype)[None], _t(ffn.inputs.f, dtype)[None]
        got = {}
        layer.attn_hc.register_forward_hook(lambda mod, a, r: got.update(attn=(a[0], r)))
        layer.ffn_hc.register_forward_hook(lambda mod, a, r: got.update(ffn=(a[0], r)))
        x_in = _t(gs.inputs.streams, dtype)[None] if (x is None or not chained) else x
        with torch.no_grad():
            y = layer(x_in)
        for key, (streams_in, (post, comb, collapsed)) in ((gs.ref.key, got["attn"]), (ffn.ref.key, got["ffn"])):
            out[f"{key}.streams_in"] = streams_in[0].float().numpy()
            out[f"{key}.post"] = post[0].float().numpy()
            out[f"{key}.comb"] = comb[0].float().numpy()
            out[f"{key}.collapsed"] = collapsed[0].float().numpy()
        out[f"{gs.ref.key}.streams_out"] = got["ffn"][0][0].float().numpy()
        out[f"{ffn.ref.key}.streams_out"] = y[0].float().numpy()
        x = y
    for gs in golden.sites:
        if gs.ref.site == "head":
            head = m.DeepseekV4HyperHead(config)
            with torch.no_grad():
                head.hc_fn.copy_(_t(gs.inputs.fn, torch.float32))
                head.hc_base.copy_(_t(gs.inputs.base, torch.float32))
                head.hc_scale.copy_(_t(gs.inputs.scale, torch.float32))
                x_in = _t(gs.inputs.streams, dtype)[None] if (x is None or not chained) else x
                out[f"{gs.ref.key}.streams_in"] = x_in[0].float().numpy()
                out[f"{gs.ref.key}.collapsed"] = head(x_in)[0].float().numpy()
    return out
