"""The one vocabulary: HC names both ways, the mix width and its inverse."""

from hccli.base.vocab import HcName, hc_from_mix_width, hc_tensor_name, mix_width, owner_of, parse_hc_name


def test_mix_width_and_inverse():
    assert mix_width(4) == 24
    assert [hc_from_mix_width(mix_width(h)) for h in range(1, 65)] == list(range(1, 65))
    assert hc_from_mix_width(25) is None and hc_from_mix_width(0) is None and hc_from_mix_width(2) is None


def test_parse_release_names_round_trip():
    for name, want in [
        ("layers.3.hc_attn_fn", HcName("layers", 3, "attn", "fn")),
        ("mtp.2.hc_ffn_scale", HcName("mtp", 2, "ffn", "scale")),
        ("hc_head_base", HcName("", None, "head", "base")),
    ]:
        got = parse_hc_name(name)
        assert got == want
        assert got.canonical() == name == hc_tensor_name(got.owner, got.site, got.part)
    assert parse_hc_name("layers.3.attn.wq_a.weight") is None
    assert parse_hc_name("layers.3.hc_attn_fn.weight") is None
    assert parse_hc_name("layers." + "9" * 5000 + ".hc_attn_fn") is None  # no 5000-digit layer numbers


def test_layer_numbering():
    n = parse_hc_name
    assert n("layers.7.hc_ffn_base").layer(40, 3) == 7
    assert n("mtp.1.hc_attn_base").layer(40, 3) == 41
    assert n("hc_head_fn").layer(40, 3) == 43
    assert owner_of("mtp.0.ffn.gate.weight") == ("mtp", 0)
    assert owner_of("embed.weight") is None
