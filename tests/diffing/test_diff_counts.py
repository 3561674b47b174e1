"""`hc diff` counts the HC tensors one way: the summary lines and the component table by the
same components (a stage's HC tensors in `dspark`), and `changed` split by its two causes."""

from __future__ import annotations

import numpy as np
import pytest
from diff_fixtures import edit_copy, release

from hccli.checkpoint.view import component_of


@pytest.fixture(scope="module")
def tiny41(tmp_path_factory):
    return release(tmp_path_factory.mktemp("rel") / "tiny41", config="tiny-v4.1.json")


def test_the_summary_and_the_table_count_the_hc_tensors_alike(hc, tiny41):
    doc = hc("diff", tiny41, tiny41, "--json").json()
    counts = doc["hc_counts"]
    by_name = {}
    for r in doc["sites"]:
        by_name.setdefault(component_of(r["name"]), []).append(r["name"])
    assert counts["by_component"] == {c: len(n) for c, n in by_name.items()}
    assert set(counts["by_component"]) == {"hyper_connections", "dspark"}  # the stages' sit under dspark
    assert sum(counts["by_component"].values()) == counts["compared"] == counts["bit_identical"] == len(doc["sites"])
    rows = {c["component"]: c for c in doc["components"]}
    # every HC tensor is in both sides' table rows of that component
    assert rows["hyper_connections"]["tensors_a"] == counts["by_component"]["hyper_connections"]
    text = hc("diff", tiny41, tiny41).stdout
    hcn, stages = counts["by_component"]["hyper_connections"], counts["by_component"]["dspark"]
    assert f"{counts['compared']} HC tensors bit-identical (all of them)" in text
    assert (f"HC: {counts['compared']} tensors compared ({hcn} in the inventory's hyper_connections row, "
            f"{stages} in its dspark row), every value kept") in text
    assert "changed: tensors in both with another dtype, shape or values beyond tolerance" in text


def test_changed_says_which_cause_it_counts(hc, tiny41, tmp_path):
    fn = "layers.0.hc_attn_fn"
    norm = "layers.0.attn_norm.weight"

    def edit(tensors):
        if fn in tensors:
            d, s, b = tensors[fn]
            x = np.frombuffer(b, "<f4").copy()
            x[0] += 1
            tensors[fn] = (d, s, x.tobytes())
        if norm in tensors:
            d, s, b = tensors[norm]
            tensors[norm] = ("F32" if d != "F32" else "BF16", s, b * 2 if d != "F32" else b[: len(b) // 2])

    other = edit_copy(tiny41, tmp_path / "edited", edit)
    r = hc("diff", tiny41, other, "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json()
    rows = {c["component"]: c for c in doc["components"]}
    hcr, norms = rows["hyper_connections"], rows["norms"]
    assert (hcr["changed"], hcr["values_differ"], hcr["dtype_or_shape_changed"]) == (1, 1, 0)
    assert (norms["changed"], norms["values_differ"], norms["dtype_or_shape_changed"]) == (1, 0, 1)
    assert doc["hc_counts"]["not_kept"] == 1 == doc["not_kept"]
    assert doc["hc_counts"]["bit_identical"] == doc["hc_counts"]["compared"] - 1
