"""Counts and sizes read right: the one plural and the one size of every renderer."""

import pytest

from hccli.base.words import close_names, plural, short, size


@pytest.mark.parametrize("n, noun, said", [
    (1, "shard", "1 shard"), (0, "shard", "0 shards"), (14, "shard", "14 shards"),
    (1, "entry", "1 entry"), (2, "entry", "2 entries"), (1_234, "tensor", "1,234 tensors"),
])
def test_plural(n, noun, said):
    assert plural(n, noun) == said


@pytest.mark.parametrize("n, said", [
    (0, "0 bytes"), (1, "1 byte"), (999, "999 bytes"), (1_000, "1.00 KB"), (974_283, "974 KB"),
    (999_999, "1.00 MB"),  # not "1,000 KB"
    (1_166_583, "1.17 MB"), (510_286_023_000, "510 GB"), (1_600_000_000_000_000, "1,600 TB"),
])
def test_size_never_says_zero_gb(n, said):
    assert size(n) == said


def test_short_beside_an_exact_count():
    assert (short(914_116), short(290_944_616_402), short(512)) == ("914 k", "291 G", "512")


def test_close_names():
    names = ["layers.3.hc_attn_fn", "layers.3.hc_ffn_fn", "embed.weight"]
    assert close_names("layers.3.hc_atn_fn", names)[0] == "layers.3.hc_attn_fn"
    assert close_names("zzz", names) == []
