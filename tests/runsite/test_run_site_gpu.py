"""`hc run-site` on a GPU: the fused site kernels (site_pre, site_write) against the CPU reference.

Golden site vectors are made on the CPU by `hc run-site --save` (numpy, hccli/ops/site.py); every
site is re-run from the golden's inputs through the path `--device cuda` takes, and
- the outputs, written as a port file, are judged by `hc check-port` (its float32-rounding
  envelope, docs/check-port.md): they must match;
- each site with tensors keeps the kernels' contract: pre/post/comb bit-identical to the exact
  split kernel on the mixes site_pre computed, collapsed and streams_out bit-identical to the
  reference's collapse and write-back (in float32, cast to the streams' dtype) given those.
Other stream counts take the torch path and say so. Run with `pytest -m gpu`; skipped without a
CUDA device.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SAMPLES
from safetensors.numpy import save_file
from site_fixtures import make_golden

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

from hccli.ops import site as S  # noqa: E402
from hccli.port.check import MATCHES  # noqa: E402
from hccli.runsite.golden import read_golden  # noqa: E402
from hccli.runsite.run import compute_for  # noqa: E402
from hccli.checkpoint.synth import make_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    pytest.importorskip("tilelang")
    d = tmp_path_factory.mktemp("ckpts")
    for name in ("tiny-v4.1.json", "tiny-v4.hf.json"):
        make_checkpoint(SAMPLES / name, d / name.split(".json")[0], seed=0)
    np.save(d / "streams-f32.npy", S.sample_streams(16, 3, 4, 64))
    return d


def _same(a, b) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.int32), b.view(np.int32))


CASES = {
    "tiny-v4.1": lambda d: (d / "tiny-v4.1", ()),
    "tiny-v4 (own-site collapse, a head mix)": lambda d: (d / "tiny-v4.hf", ()),
    "tiny-v4.1, float32 streams": lambda d: (d / "tiny-v4.1", ("--streams", str(d / "streams-f32.npy"))),
    "V4.1-Flash shapes": lambda d: (SAMPLES / "deepseek-v4.1-flash.json", ("--layers", "0-1", "--tokens", "16")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_site_kernels_match_the_cpu_reference_and_keep_their_contract(hc, ckpts, tmp_path, case):
    from hccli.kernels.exact import hc_split_sinkhorn_exact

    source, args = CASES[case](ckpts)
    golden = make_golden(source, tmp_path / "golden.safetensors", *args)
    g = read_golden(golden)
    p = g.params
    c = compute_for(None, "cuda", p.hc_mult, g.dim, p.streams_dtype)
    assert (c.path, c.note) == ("site-kernels", None), c.how
    port, fused = {}, 0
    for gs in g.sites:
        inp = gs.inputs
        got = c.run(inp, p)
        for step, a in got.items():
            port[f"{gs.ref.key}.{step}"] = np.ascontiguousarray(a, dtype=np.float32)
        if inp.fn is None or inp.site == "head":
            continue
        fused += 1
        what = f"{case}, site {gs.ref.key}"
        assert set(got) == {"mixes", "pre", "post", "comb", "collapsed", "streams_out"}, what
        dev = lambda a: torch.as_tensor(np.ascontiguousarray(a, dtype=np.float32), device="cuda")  # noqa: E731
        split = hc_split_sinkhorn_exact(dev(got["mixes"]), dev(inp.scale), dev(inp.base), p.hc_mult, p.iters, p.hc_eps)
        for name, want in zip(("pre", "post", "comb"), split):
            assert _same(got[name], want.cpu().numpy()), f"{name} differs from exact on the kernel's mixes, {what}"
        w = got["pre"] if inp.pre_mix is None else inp.pre_mix
        assert _same(got["collapsed"], S.cast(S.collapse(inp.streams, w), p.streams_dtype)), f"collapsed, {what}"
        out = S.cast(S.write_back(inp.f, inp.streams, got["post"], got["comb"]), p.streams_dtype)
        assert _same(got["streams_out"], out), f"streams_out, {what}"
    assert fused >= 4
    save_file(port, str(tmp_path / "port.safetensors"))
    r = hc("check-port", str(tmp_path / "port.safetensors"), "--golden", str(golden), "--json")
    assert r.exit_code == 0 and r.json()["summary"] == MATCHES, r.stdout[-2000:] + r.stderr


def test_run_site_on_cuda_says_what_ran(hc, ckpts):
    src = str(ckpts / "tiny-v4.1")
    r = hc("run-site", src, "--device", "cuda", "--json")
    doc, ref = r.json(), hc("run-site", src, "--json").json()
    assert r.exit_code == 0 and doc["path"] == "site-kernels" and doc["notes"] == [], r.stderr
    assert doc["impl"].startswith("site kernels on cuda:0: site_pre and site_write")
    assert [s["key"] for s in doc["sites"]] == [s["key"] for s in ref["sites"]]
    for a, b in zip(doc["sites"], ref["sites"]):  # the chains part by float32 rounding only
        for name in ("pre", "post"):
            if b[name] is not None:
                np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-6, err_msg=f"{a['key']} {name}")
        np.testing.assert_allclose(a["collapsed_rms"], b["collapsed_rms"], rtol=1e-2)
    r = hc("run-site", src, "--device", "cuda", "--layers", "0")
    assert r.exit_code == 0 and "ran: site kernels on cuda:0" in r.stdout and "note" not in r.stdout


def test_other_stream_counts_and_save_take_the_torch_path_saying_so(hc, ckpts, tmp_path):
    cfg = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
    cfg["hc_mult"] = 2
    path = tmp_path / "hc2.json"
    path.write_text(json.dumps(cfg))
    r = hc("run-site", str(path), "--device", "cuda", "--tokens", "4", "--json")
    doc, ref = r.json(), hc("run-site", str(path), "--tokens", "4", "--json").json()
    assert r.exit_code == 0 and doc["path"] == "torch" and doc["impl"].startswith("exact on cuda:0"), r.stderr
    assert doc["notes"] == ["the site kernels (site_pre, site_write) did not run on cuda:0: the site kernels are "
                            "built for hc_mult 4 only, got 2; the torch path ran"]
    np.testing.assert_allclose(doc["sites"][0]["pre"], ref["sites"][0]["pre"], rtol=1e-4, atol=1e-6)
    r = hc("run-site", str(ckpts / "tiny-v4.1"), "--device", "cuda", "--layers", "0", "--json",
           "--save", str(tmp_path / "g.safetensors"))
    assert r.exit_code == 0 and r.json()["path"] == "torch" and "--save writes every step" in r.json()["notes"][0]
