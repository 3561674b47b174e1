"""The header parser's fast path against its careful path: whenever the fast path
accepts a header, the careful path must accept the same header and agree on it."""

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hccli.checkpoint.header import parse_header
from hccli.checkpoint.header_types import DTYPES, N_LEN
from hccli.checkpoint.header_fast import parse_fast
from hccli.checkpoint.header_careful import parse_careful

CASES = {"n": 0, "fast": 0}
WHOLE = [d for d, bits in DTYPES.items() if bits % 8 == 0]


@st.composite
def headers(draw):
    n = draw(st.integers(0, 12))
    # BMP names: astral ones escape to \\ud83d-style pairs with ensure_ascii, which the fast path
    # leaves to the careful one (correct, just not what this test is for)
    bmp = st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",))
    names = draw(st.lists(st.text(bmp, min_size=1, max_size=12).filter(lambda s: s != "__metadata__"),
                          min_size=n, max_size=n, unique=True))
    entries, offset = [], 0
    for name in names:
        dtype = draw(st.sampled_from(WHOLE))
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
        size = DTYPES[dtype] // 8
        for d in shape:
            size *= d
        entries.append((name, {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}))
        offset += size
    rnd = random.Random(draw(st.integers(0, 2**32)))
    rnd.shuffle(entries)  # any order of entries and of the fields inside them is valid
    doc = {}
    if draw(st.booleans()):
        doc["__metadata__"] = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
    for name, e in entries:
        doc[name] = dict(rnd.sample(list(e.items()), 3)) if draw(st.booleans()) else e
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    return text, offset


@settings(max_examples=300, deadline=None)
@given(headers())
def _agree(case):
    text, data = case
    body = text.encode()
    size = N_LEN + len(body) + data
    CASES["n"] += 1
    fast = parse_fast(body, len(body), size, "f")
    careful = parse_careful(text, len(body), size, "f")
    if fast is not None:
        CASES["fast"] += 1
        assert fast == careful
    assert parse_header(len(body).to_bytes(8, "little") + body, size, "f") == careful


def test_fast_path_agrees_with_careful_path():
    CASES.update(n=0, fast=0)
    _agree()  # runs every example
    assert CASES["n"] >= 300 and CASES["fast"] > CASES["n"] * 3 // 4, CASES
