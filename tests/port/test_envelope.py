"""The envelope a port carries from a step it did not give (hccli/port/envelope.py) bounds what its
own rounding there does: mixes moved anywhere within their envelope move pre, post and comb by no
more than the carried part, and the bound is first-order tight (a sign pattern reaches it)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES
from site_fixtures import make_golden

from hccli.checkpoint.synth import make_checkpoint
from hccli.ops.split_np import split_sinkhorn
from hccli.port import envelope as E
from hccli.runsite.golden import read_golden


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("env")
    make_checkpoint(SAMPLES / "tiny-v4.1.json", d / "ckpt", seed=3)
    g = read_golden(make_golden(d / "ckpt", d / "g.safetensors", "--layers", "0", "--site", "attn",
                                "--tokens", "32"))
    return g.sites[0], g.params


def _split64(gs, params, m):
    i = gs.inputs
    return split_sinkhorn(m, i.scale.astype(np.float64), i.base.astype(np.float64), params.hc_mult, params.iters,
                          params.hc_eps, np.float64)


def test_mixes_within_their_envelope_move_the_split_by_no_more_than_it_carries(site):
    gs, params = site
    hc, i = params.hc_mult, gs.inputs
    m = gs.steps["mixes"].astype(np.float64)
    # an envelope far above rounding, so that the moves are well above float64's own noise
    m_env = 1e-4 * (np.abs(m) + 1e-3)
    pre, post, comb = _split64(gs, params, m)
    carried = E.comb_carried(lambda mm: _split64(gs, params, mm)[2], m, m_env, hc)
    sc = i.scale.astype(np.float64)
    carried_pre = E.sigmoid_carried(pre, sc[0], m_env[:, :hc])
    carried_post = E.sigmoid_carried(post / 2, sc[1], m_env[:, hc:2 * hc], 2.0)
    rng = np.random.default_rng(0)
    reached = 0.0
    for _ in range(20):
        dm = rng.choice([-1.0, 1.0], size=m.shape) * m_env
        p2, q2, c2 = _split64(gs, params, m + dm)
        # first order, with room for the second-order term of an envelope this wide
        assert (np.abs(c2 - comb) <= carried * 1.01 + 1e-15).all()
        assert (np.abs(p2 - pre) <= carried_pre * 1.01 + 1e-15).all()
        assert (np.abs(q2 - post) <= carried_post * 1.01 + 1e-15).all()
        reached = max(reached, float((np.abs(c2 - comb) / np.maximum(carried, 1e-300)).max()))
    # the worst sign pattern for one element reaches its bound: the carried part is not slack
    t, j, k = np.unravel_index(np.argmax(carried), carried.shape)
    signs = np.zeros_like(m)
    for a in range(hc * hc):
        up = m.copy()
        up[t, 2 * hc + a] += 1e-7
        signs[t, 2 * hc + a] = np.sign(_split64(gs, params, up)[2][t, j, k] - comb[t, j, k])
    c3 = _split64(gs, params, m + signs * m_env)[2]
    assert 0.98 <= abs(c3[t, j, k] - comb[t, j, k]) / carried[t, j, k] <= 1.01
    assert reached > 0.2
