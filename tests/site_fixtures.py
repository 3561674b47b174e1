"""Golden site vectors made by `hc run-site --save`, and port files computed from a golden's
inputs the way a port with a given mistake computes them (site by site, hccli/ops/site.py's
forward with a Variant), written with safetensors' own serializer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import run_hc
from safetensors.numpy import save_file

from hccli.ops import site as S
from hccli.runsite.golden import read_golden


def make_golden(source, out: Path, *args) -> Path:
    r = run_hc("run-site", str(source), "--save", str(out), "--json", *args)
    assert r.exit_code == 0, r.stderr
    return out


def port_steps(golden_path: Path, variant: S.Variant = S.REFERENCE, steps=None) -> dict[str, np.ndarray]:
    """{name: values} of a port with `variant`'s mistake, for the golden's inputs (only `steps`)."""
    g = read_golden(golden_path)
    out: dict[str, np.ndarray] = {}
    handoff = None
    for i, gs in enumerate(g.sites):
        if i == 0 or g.sites[i - 1].ref.stack != gs.ref.stack:
            handoff = S.one_hot(g.tokens, g.params.hc_mult)
        inp = gs.inputs
        if variant.collapse_with == "handoff" and inp.pre_mix is None:  # V4.1's reading of a V4 model
            inp = S.SiteInputs(inp.site, inp.streams, inp.fn, inp.base, inp.scale, inp.f, handoff)
        if variant.collapse_with == "own" and inp.fn is not None:  # V4's reading of a V4.1 model
            inp = S.SiteInputs(inp.site, inp.streams, inp.fn, inp.base, inp.scale, inp.f, None)
        got = S.forward(inp, g.params, variant)
        handoff = got.get("pre", handoff)
        for step, a in got.items():
            if (steps is None or step in steps) and a.shape == gs.steps[step].shape:
                out[f"{gs.ref.key}.{step}"] = np.ascontiguousarray(a, dtype=np.float32)
    return out


def write_port(golden_path: Path, out: Path, variant: S.Variant = S.REFERENCE, steps=None) -> Path:
    save_file(port_steps(golden_path, variant, steps), str(out))
    return out
