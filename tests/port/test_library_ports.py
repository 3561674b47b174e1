"""`hc check-port` on the HC code people run: ports made of transformers', mlx-lm's and TileKernels'
own code (tests/port/lib_*.py), on goldens `hc run-site` wrote for the tiny V4 and V4.1
checkpoints. Unmodified, each matches (transformers' bf16 write-back named as the variant it
ships, and accepted when asked) over seeds at 256 tokens and 6 layers, run site by site from the
golden's inputs and run chained; each mistake edited into the library's own function is named,
alone and, in transformers, on top of its bf16 write-back. Each test skips, saying why, where its
library is missing; CI installs them all (the test extra)."""

from __future__ import annotations

import pytest
from port_fixtures import as_port, edited, library_golden, save_port

import lib_mlx as MLX
import lib_tilekernels as TK
import lib_transformers as TF
from hccli.port.check import MATCHES, check_port
from hccli.runsite.golden import read_golden

V4, V41 = "tiny-v4.hf.json", "tiny-v4.1.json"
SEEDS = (1, 2, 3)
MORE_SEEDS = (4, 5, 6, 7, 8)
ACCEPT = ("bf16-write-back",)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("library-goldens")


def _golden(root, config, seed=1, tokens=256, layers="0-5"):
    return read_golden(library_golden(root, config, tokens, layers, seed))


def _worst(report) -> float:
    return max(e.worst for e in report.errors)


def _judge_unmodified(lib: str, g, tensors):
    """The verdicts a correct port of `lib` must get: transformers' write-back named (exit 1), then
    accepted (exit 0); the others match. Returns the worst ratio to the envelope."""
    if lib != "transformers":
        r = check_port(g, as_port(tensors), lib)
        assert r.exit_code == 0 and r.summary == MATCHES, r.summary
        return _worst(r)
    r = check_port(g, as_port(tensors), lib)
    assert r.exit_code == 1 and r.departs_at.endswith(".streams_out"), r.summary
    assert r.explained_by[0].mistakes == ("bf16-write-back",), r.summary
    assert "a variant that transformers (DeepseekV4DecoderLayer) ships" in r.summary and r.explained_by[0].cost_ulps > 1
    r = check_port(g, as_port(tensors), lib, accept=ACCEPT)
    assert r.exit_code == 0 and r.summary.startswith(f"{MATCHES}, given the accepted variant"), r.summary
    return r.explained_by[0].worst


def _port(lib: str, g, chained: bool, **kw):
    return {"transformers": TF.port, "mlx-lm": MLX.port, "tile-kernels": TK.port}[lib](g, chained=chained, **kw)


CASES = [("transformers", V4), ("mlx-lm", V41), ("tile-kernels", V41), ("tile-kernels", V4)]
IDS = [f"{lib}-{'v4' if c == V4 else 'v4.1'}" for lib, c in CASES]


@pytest.mark.parametrize("lib,config", CASES, ids=IDS)
@pytest.mark.parametrize("chained", [False, True], ids=["site-by-site", "chained"])
def test_an_unmodified_library_port_matches(root, lib, config, chained):
    for seed in SEEDS:
        g = _golden(root, config, seed)
        tensors = _port(lib, g, chained)
        assert _judge_unmodified(lib, g, tensors) <= 1, seed


@pytest.mark.slow
@pytest.mark.parametrize("lib,config", CASES, ids=IDS)
def test_an_unmodified_library_port_matches_on_more_seeds_and_the_small_golden(root, lib, config):
    for seed in MORE_SEEDS:
        g = _golden(root, config, seed)
        _judge_unmodified(lib, g, _port(lib, g, True))
    g = _golden(root, config, 1, tokens=16, layers="0-1")
    _judge_unmodified(lib, g, _port(lib, g, False))


def test_a_chained_port_is_judged_from_its_own_inputs_and_says_so(hc, root, tmp_path):
    g = _golden(root, V4)
    port = save_port(TF.port(g, chained=True), tmp_path / "tf.safetensors")
    r = hc("check-port", str(port), "--golden", g.path, "--accept", "bf16-write-back", "--json")
    doc = r.json()
    assert r.exit_code == 0 and doc["exit_code"] == 0 and doc["accepted"] == ["bf16-write-back"], doc["summary"]
    used = {u["name"]: u for u in doc["inputs_used"]}
    # the bf16 write-back's streams differ from the golden's from the first written-back site on
    assert used["streams_in"]["sites"] == len(g.sites) and used["streams_in"]["differing"] > 0
    assert used["streams_in"]["first_site"] == g.sites[1].ref.key
    r = hc("check-port", str(port), "--golden", g.path)
    assert r.exit_code == 1 and "judged from the port's own streams_in" in r.stdout
    assert "--accept bf16-write-back judges the rest" in r.stdout
    r = hc("check-port", str(port), "--golden", g.path, "--accept", "bf16-writeback")
    assert r.exit_code == 2 and "--accept" in r.stderr and "bf16-write-back" in r.stderr


def test_accept_takes_every_shipped_variant_and_nothing_else():
    from hccli.cli.commands.check_port import ACCEPTABLE
    from hccli.port.mistakes import SHIPPED

    assert set(ACCEPTABLE) == set(SHIPPED)


# ---- mistakes edited into the libraries' own functions -----------------------------------------

def _tf_layer(monkeypatch, f32_write_back: bool, untransposed: bool = False):
    """transformers' DecoderLayer as shipped, or writing back in float32 and casting once as the
    reference does (the port's other mistakes are then judged alone); untransposed: comb applied
    untransposed in its write-back."""
    cls = TF.modeling().DeepseekV4DecoderLayer
    edits = []
    if f32_write_back:
        for out in ("attn_output", "mlp_output"):
            old = (f"post.to(dtype).unsqueeze(-1) * {out}.unsqueeze(-2) + torch.matmul(\n"
                   "        comb.to(dtype).transpose(-1, -2), hidden_states\n    )")
            comb = "comb" if untransposed else "comb.transpose(-1, -2)"
            edits.append((old, f"(post.unsqueeze(-1) * {out}.float().unsqueeze(-2) + torch.matmul({comb}, "
                               "hidden_states.float())).to(dtype)"))
    elif untransposed:
        edits.append(("comb.to(dtype).transpose(-1, -2)", "comb.to(dtype)"))
    if edits:
        monkeypatch.setattr(cls, "forward", edited(cls.forward, *edits))


def _tf_hc(monkeypatch, *edits):
    cls = TF.modeling().DeepseekV4HyperConnection
    monkeypatch.setattr(cls, "forward", edited(cls.forward, *edits))


TF_PROJECTION = "flattened = F.linear(flattened, self.fn.float())"


def _tf_cases():
    def iters(mp):
        _tf_hc(mp, ("range(self.hc_sinkhorn_iters - 1)", "range(10 - 1)"))
        return {}

    def nf_bf16(mp):  # the operands rounded to bf16, the product summed in float32
        _tf_hc(mp, (TF_PROJECTION, "flattened = F.linear(flattened.bfloat16().float(), self.fn.bfloat16().float())"))
        return {}

    def nf_bf16_out(mp):  # a plain bf16 matmul: its result is bf16
        _tf_hc(mp, (TF_PROJECTION, "flattened = F.linear(flattened.bfloat16(), self.fn.bfloat16()).float()"))
        return {}

    def module_bf16(mp):
        import torch
        return {"prepare": lambda layer: (layer.attn_hc.to(torch.bfloat16), layer.ffn_hc.to(torch.bfloat16))}

    def hc_eps(mp):  # a config typed 1e-5
        def prepare(layer):
            layer.attn_hc.hc_eps = layer.ffn_hc.hc_eps = 1e-5
        return {"prepare": prepare}

    def untransposed(mp):  # edited with the write-back, below
        return {}
    return {"iters-10": iters, "norm-first-bf16": nf_bf16, "norm-first-bf16-out": nf_bf16_out,
            "module-bf16": module_bf16, "hc-eps-1e-05": hc_eps, "comb-untransposed": untransposed}


def _mlx_hc(monkeypatch, *edits):
    _, _, v41 = MLX.modules()
    monkeypatch.setattr(v41.HyperConnection, "__call__", edited(v41.HyperConnection.__call__, *edits))


MLX_PROJECTION = "mix = (flat @ self.fn.T)"


def _mlx_cases():
    def iters(mp):
        _mlx_hc(mp, ("iters=self.iters", "iters=10"))
        return {}

    def nf_bf16(mp):
        _mlx_hc(mp, (MLX_PROJECTION, "mix = (flat.astype(mx.bfloat16).astype(mx.float32) @ "
                                     "self.fn.T.astype(mx.bfloat16).astype(mx.float32))"))
        return {}

    def nf_bf16_out(mp):
        _mlx_hc(mp, (MLX_PROJECTION, "mix = (flat.astype(mx.bfloat16) @ self.fn.T.astype(mx.bfloat16))"))
        return {}

    def module_bf16(mp):
        mx, _, _ = MLX.modules()
        return {"prepare": lambda layer: (layer.attn_hc.set_dtype(mx.bfloat16), layer.ffn_hc.set_dtype(mx.bfloat16))}

    def hc_eps(mp):
        mx, _, _ = MLX.modules()

        def prepare(layer):
            for hc in (layer.attn_hc, layer.ffn_hc):
                hc.hc_eps, hc._eps = 1e-5, mx.array([1e-5], dtype=mx.float32)
        return {"prepare": prepare}

    def untransposed(mp):
        _, _, v41 = MLX.modules()
        mp.setattr(v41, "_expand", edited(v41._expand, ("mx.sum(comb[..., None]", "mx.sum(mx.swapaxes(comb, -1, -2)[..., None]")))
        return {}
    return {"iters-10": iters, "norm-first-bf16": nf_bf16, "norm-first-bf16-out": nf_bf16_out,
            "module-bf16": module_bf16, "hc-eps-1e-05": hc_eps, "comb-untransposed": untransposed}


TK_OPERANDS = ("        residual.view(-1, 1, rms_group_size),\n        mhc_fn.view(mhc_mult, 1, rms_group_size),\n"
               "    )\n    sqrsum")


def _tk_cases():
    def projection(mp, operand, after):
        m = TK.mhc()
        mp.setattr(m, "mhc_pre_norm_fn_ref", edited(m.mhc_pre_norm_fn_ref, (TK_OPERANDS, (
            f"        residual.view(-1, 1, rms_group_size){operand},\n"
            f"        mhc_fn.view(mhc_mult, 1, rms_group_size){operand},\n    ){after}\n    sqrsum"))))
        return {}

    def untransposed(mp):
        m = TK.mhc()
        mp.setattr(m, "mhc_post_ref", edited(m.mhc_post_ref, ("'abmn,abmc->abnc'", "'abnm,abmc->abnc'")))
        return {}
    return {"iters-10": lambda mp: {"repeat": 10},  # sinkhorn_normalize_ref's own default
            "post-mult-1": lambda mp: {"post_mult": 1.0},  # mhc_pre's default post_mult_value
            "projection-bf16": lambda mp: projection(mp, ".bfloat16().float()", ""),
            "projection-bf16-out": lambda mp: projection(mp, ".bfloat16()", ""),
            "module-bf16": lambda mp: {"dtype": __import__("torch").bfloat16},
            "hc-eps-1e-05": lambda mp: {"eps": 1e-5},
            "comb-untransposed": untransposed}


MISTAKES = ([("transformers", k, w) for k in _tf_cases() for w in ("alone", "on the bf16 write-back")]
            + [("mlx-lm", k, "alone") for k in _mlx_cases()] + [("tile-kernels", k, "alone") for k in _tk_cases()])


@pytest.mark.parametrize("lib,key,how", MISTAKES, ids=[f"{a}-{b}-{c.split()[-1]}" for a, b, c in MISTAKES])
def test_a_mistake_edited_into_a_library_is_named(root, monkeypatch, lib, key, how):
    {"transformers": TF.modeling, "mlx-lm": MLX.modules, "tile-kernels": TK.mhc}[lib]()
    config = V4 if lib == "transformers" else V41
    g = _golden(root, config, 1, tokens=64, layers="0-1")
    if lib == "transformers":
        _tf_layer(monkeypatch, how == "alone", key == "comb-untransposed")
    kwargs = {"transformers": _tf_cases, "mlx-lm": _mlx_cases, "tile-kernels": _tk_cases}[lib]()[key](monkeypatch)
    r = check_port(g, as_port(_port(lib, g, False, **kwargs)), lib)
    want = {key} | ({"bf16-write-back"} if how != "alone" else set())
    named = [set(e.mistakes) for e in r.explained_by]
    assert r.exit_code == 1 and want in named, (r.summary, [e.mistakes for e in r.explained_by])
    if how != "alone":  # accepted, the rest of the port is judged: the mistake alone is left
        r = check_port(g, as_port(_port(lib, g, False, **kwargs)), lib, accept=ACCEPT)
        assert r.exit_code == 1 and "on top of" in r.summary and key in r.explained_by[0].mistakes, r.summary


def test_the_unmodified_transformers_port_with_its_write_back_edited_to_float32_matches(root, monkeypatch):
    _tf_layer(monkeypatch, True)
    g = _golden(root, V4)
    r = check_port(g, as_port(TF.port(g, chained=True)), "transformers, float32 write-back")
    assert r.exit_code == 0 and r.summary == MATCHES, r.summary
