"""`hc check-port`: the reference matches, equivalent orders match, every known mistake injected
into a port file is named (alone and in pairs), an unexplained departure says so, and no
mistake is named that the port's numbers do not show."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from conftest import SAMPLES
from safetensors.numpy import save_file
from site_fixtures import make_golden, port_steps, write_port

from hccli.ops import site as S
from hccli.port.check import MATCHES, check_port
from hccli.port.mistakes import FACTOR, catalogue
from hccli.runsite.golden import read_golden
from hccli.checkpoint.synth import make_checkpoint

FACTOR_VARIANT = S.Variant(collapsed_factor=2 ** 0.5)


@pytest.fixture(scope="module", params=["tiny-v4.1.json", "tiny-v4.hf.json"])
def golden(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param.split(".json")[0])
    make_checkpoint(SAMPLES / request.param, d / "ckpt", seed=1)
    return make_golden(d / "ckpt", d / "golden.safetensors")


@pytest.fixture(scope="module")
def small(golden):
    """The same model's first layer only, at 8 tokens: the pairs are many."""
    out = golden.parent / "small.safetensors"
    return make_golden(golden.parent / "ckpt", out, "--layers", "0", "--tokens", "8", "--seed", "2")


def _mistakes(path):
    params = read_golden(path).params
    return [m for m in catalogue(params) if m.kind != "iters" or m.key in ("iters-10", "iters-1")]


def _named(named: list, keys: set[str], path, variant) -> bool:
    """The injected mistakes are named; or only some of them, the rest leaving no trace beyond
    rounding (softmax over the column does nothing once hc_eps is left out after it: Sinkhorn's
    limit is the same for either scaling of exp(l)); or a named explanation that is no injected
    mistake computes the very same port, bit for bit."""
    if any(set(e) <= keys for e in named):
        return True
    mine = port_steps(path, variant)
    for e in named:
        v = S.REFERENCE
        for k in e:
            m = next((m for m in _mistakes(path) if m.key == k), None)
            v = m.variant(v) if m is not None else v
        other = port_steps(path, v)
        if all(np.array_equal(mine[n], other[n]) for n in mine) and FACTOR.key not in e:
            return True
    return False


def test_the_reference_and_equivalent_orders_match(hc, golden, tmp_path):
    r = hc("check-port", str(golden), "--golden", str(golden), "--json")
    assert r.exit_code == 0 and r.json()["summary"] == MATCHES and r.json()["departs_at"] is None
    # mlx-lm normalises before the projection: the same op within rounding, not a mistake
    nf = write_port(golden, tmp_path / "mlx.safetensors", S.Variant(norm_first=True))
    r = hc("check-port", str(nf), "--golden", str(golden), "--json")
    assert r.exit_code == 0 and r.json()["summary"] == MATCHES
    assert any(e["differing"] > 0 for e in r.json()["errors"])  # not the same bits: within rounding


def test_the_torch_path_is_a_port_that_matches(hc, golden, tmp_path):
    pytest.importorskip("torch")
    from hccli.kernels.site_torch import torch_forward

    g = read_golden(golden)
    compute, _ = torch_forward("torch", "cpu", 4)
    save_file({f"{gs.ref.key}.{k}": np.ascontiguousarray(v) for gs in g.sites
               for k, v in compute(gs.inputs, g.params).items()}, str(tmp_path / "torch.safetensors"))
    r = hc("check-port", str(tmp_path / "torch.safetensors"), "--golden", str(golden), "--json")
    assert r.exit_code == 0, r.json()["summary"]


def test_every_single_mistake_is_named(hc, golden, tmp_path):
    for m in _mistakes(golden) + [FACTOR]:
        v = FACTOR_VARIANT if m is FACTOR else m.variant()
        port = write_port(golden, tmp_path / f"{m.key}.safetensors", v)
        r = hc("check-port", str(port), "--golden", str(golden), "--json")
        doc = r.json()
        assert r.exit_code == 1 and doc["exit_code"] == 1, (m.key, doc["summary"])
        assert doc["summary"].startswith(f"departs at step {doc['departs_at']}: explained by"), doc["summary"]
        named = [tuple(e["mistakes"]) for e in doc["explained_by"]]
        if m is FACTOR:
            assert named == [("collapsed-factor",)] and "factor sqrt(2)" in doc["summary"], doc["summary"]
            continue
        assert _named(named, {m.key}, golden, v), (m.key, doc["summary"])


@pytest.mark.slow
def test_every_pair_of_mistakes_is_named(small):
    g = read_golden(small)
    items = [(m.key, m.variant(), m.kind) for m in _mistakes(small) if m.key != "iters-1"]
    items.append((FACTOR.key, FACTOR_VARIANT, "factor"))
    missed = []
    for (ka, va, ga), (kb, vb, gb) in combinations(items, 2):
        if ga == gb:
            continue
        both = S.Variant(**{f: getattr(vb, f) if getattr(vb, f) != getattr(S.REFERENCE, f) else getattr(va, f)
                            for f in S.Variant.__dataclass_fields__})
        r = check_port(g, _as_port(port_steps(small, both)), "pair")
        named = [e.mistakes for e in r.explained_by]
        ok = r.departs_at is not None and (_named(named, {ka, kb}, small, both) if FACTOR.key not in (ka, kb)
                                           else any(set(e) == {ka, kb} for e in named))
        if not ok:
            missed.append((ka, kb, r.summary))
    assert not missed, missed[:5]


def _as_port(steps: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, a in steps.items():
        key, _, step = name.rpartition(".")
        out.setdefault(key, {})[step] = a
    return out


def test_a_subset_of_the_steps_is_enough(hc, golden, tmp_path):
    port = write_port(golden, tmp_path / "out.safetensors", S.Variant(comb_transposed=False), steps={"streams_out"})
    r = hc("check-port", str(port), "--golden", str(golden), "--json")
    doc = r.json()
    assert r.exit_code == 1 and doc["steps_given"] == ["streams_out"]
    assert [e["mistakes"] for e in doc["explained_by"]] == [["comb-untransposed"]], doc["summary"]


def test_an_unexplained_departure_says_so(hc, golden, tmp_path):
    steps = port_steps(golden)
    key = next(k for k in steps if k.endswith(".mixes"))
    steps[key] = steps[key] + np.float32(0.05) * np.random.default_rng(0).standard_normal(steps[key].shape,
                                                                                          dtype=np.float32)
    save_file(steps, str(tmp_path / "odd.safetensors"))
    r = hc("check-port", str(tmp_path / "odd.safetensors"), "--golden", str(golden), "--json")
    doc = r.json()
    assert r.exit_code == 1 and doc["explained_by"] == []
    assert doc["summary"].startswith(f"departs at step {key}: no known mistake explains it"), doc["summary"]
    r = hc("check-port", str(tmp_path / "odd.safetensors"), "--golden", str(golden))
    assert r.exit_code == 1 and "no known mistake explains it" in r.stdout


def test_bad_input_exits_2_naming_the_file(hc, golden, tmp_path):
    r = hc("check-port", str(golden), "--golden", str(tmp_path / "none.safetensors"))
    assert r.exit_code == 2 and "none.safetensors" in r.stderr
    save_file({"elsewhere": np.zeros(3, np.float32)}, str(tmp_path / "empty.safetensors"))
    r = hc("check-port", str(tmp_path / "empty.safetensors"), "--golden", str(golden))
    assert r.exit_code == 2 and "holds none of the steps" in r.stderr
    key = read_golden(golden).sites[0].ref.key
    save_file({f"{key}.mixes": np.zeros((3, 24), np.float32)}, str(tmp_path / "shape.safetensors"))
    r = hc("check-port", str(tmp_path / "shape.safetensors"), "--golden", str(golden))
    assert r.exit_code == 2 and f"tensor `{key}.mixes` has shape [3, 24]" in r.stderr
    r = hc("check-port", str(golden), "--golden", str(tmp_path / "shape.safetensors"))
    assert r.exit_code == 2 and "metadata 'format'" in r.stderr


def test_where_nothing_explains_the_closest_hypotheses_are_named_apart(hc, golden, tmp_path):
    # comb applied untransposed, and one site's streams_out off by more than that: no hypothesis
    # explains the port, the untransposed comb takes away most of the first departure
    steps = port_steps(golden, S.Variant(comb_transposed=False))
    key = [k for k in steps if k.endswith(".streams_out")][-1]
    steps[key] = steps[key] * np.float32(1.01)
    save_file(steps, str(tmp_path / "near.safetensors"))
    r = hc("check-port", str(tmp_path / "near.safetensors"), "--golden", str(golden), "--json")
    doc = r.json()
    assert r.exit_code == 1 and doc["explained_by"] == [], doc["summary"]
    closest = doc["closest"]
    assert 1 <= len(closest) <= 3 and closest[0]["mistakes"] == ["comb-untransposed"], closest
    assert closest[0]["explains"] > 0.5 and [c["explains"] for c in closest] == sorted(
        [c["explains"] for c in closest], reverse=True)
    assert "closest: comb applied untransposed" in doc["summary"]


def test_explanations_are_ranked_and_at_most_three(golden):
    # fn in bf16 for bf16 streams: several projection readings give close numbers; the best first
    g = read_golden(golden)
    r = check_port(g, _as_port(port_steps(golden, S.Variant(projection="fn-bf16"))), "fn")
    assert 1 <= len(r.explained_by) <= 3, r.summary
    ranks = [(len(e.mistakes), e.worst) for e in r.explained_by]
    assert ranks == sorted(ranks) and r.explained_by[0].mistakes == ("fn-bf16",), r.summary


def test_a_port_that_gives_its_own_inputs_is_judged_from_them(golden):
    # the first site's streams as a port run elsewhere held them: other bf16 values (a chained
    # port's own streams_out). Judged from the golden's, its steps depart; from its own, they
    # match, and the drift is said.
    from hccli.base.floats import to_bf16

    g = read_golden(golden)
    gs = g.sites[0]
    x = to_bf16(gs.inputs.streams * np.float32(1 + 2.0 ** -6))
    own = S.forward(S.SiteInputs(gs.inputs.site, x, gs.inputs.fn, gs.inputs.base, gs.inputs.scale, gs.inputs.f,
                                 gs.inputs.pre_mix), g.params)
    port = {gs.ref.key: dict(own)}
    assert check_port(g, port, "elsewhere").exit_code == 1
    port[gs.ref.key]["streams_in"] = x
    r = check_port(g, port, "elsewhere")
    assert r.exit_code == 0 and r.summary == MATCHES, r.summary
    (used,) = r.inputs_used
    assert used.name == "streams_in" and used.sites == 1 and used.differing > 0 and used.first_site == gs.ref.key
