"""`hc ... --json` text: msgspec's C encoder where its text is json.dumps' own, json otherwise; the
bytes are the same either way (golden files pin whole documents; this pins the rule)."""

import json

import msgspec  # noqa: F401 - json_text uses msgspec only when it is loaded, as inspect loads it
from hypothesis import given, settings
from hypothesis import strategies as st

from hccli.cli.output import json_text

_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text()
            | st.sampled_from([1e16, 1e-5, 0.0001, 10.00001, 2.5e-05, "\x7f", "é", "\u2028", "1e5", "0.0000"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner,
                                                                                         max_size=5), max_leaves=30)


@settings(max_examples=1500, deadline=None)
@given(_values)
def test_json_text_is_json_dumps(value):
    assert json_text(value) == json.dumps(value, indent=2, allow_nan=False)


def test_an_inspect_document_takes_the_fast_path(monkeypatch):
    # finite floats in the ordinary range, ASCII names: msgspec's text, and json's text unused
    doc = {"hc": [{"scale": [1.0384621620178223, 0.5, 1e-3], "base": [0.25] * 24, "name": "layers.0"}], "n": 96085}
    expected = json.dumps(doc, indent=2, allow_nan=False)
    monkeypatch.setattr(json, "dumps", lambda *a, **k: (_ for _ in ()).throw(AssertionError("json used")))
    assert json_text(doc) == expected
