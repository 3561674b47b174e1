"""Hostile and careless config files: bounded before anything is built, refused by
name, one line each, never a traceback or an allocation that does not end."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, SAMPLES, run_hc
from hccli.model.config.model import load_config, parse_config
from hccli.model.config.bounds import MAX_HC_MULT, MAX_LAYERS
from hccli.model.config.read import MAX_CONFIG_BYTES
from hccli.base.errors import HcError


def _tiny(**changes):
    d = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
    d.update(changes)
    return d


def _bare(**changes):
    """The tiny config without its layer lists, so that n_layers can change alone."""
    d = _tiny(**changes)
    for key in ("compress_ratios", "kv_source_layers", "index_source_layers", "engram_layer_ids",
                "engram_num_embeddings", "dspark_target_layer_ids"):
        d.pop(key)
    return d


def _err(text, source="cfg.json") -> str:
    with pytest.raises(HcError) as ei:
        parse_config(text if isinstance(text, (str, bytes)) else json.dumps(text), source)
    msg = ei.value.message
    assert ei.value.exit_code == 2 and "\n" not in msg and source in msg
    return msg


@pytest.mark.parametrize("n", [10**6, 10**7, 10**30])
def test_huge_layer_counts_are_refused_by_their_bound(n):
    start = time.perf_counter()
    msg = _err(_bare(n_layers=n))
    assert "'n_layers'" in msg and f"at most {MAX_LAYERS:,}" in msg
    assert time.perf_counter() - start < 1


def test_float_layer_count_beyond_int_range_is_one_line():
    msg = _err(json.dumps(_bare()).replace('"n_layers": 8', '"n_layers": 1e300'))
    assert "'n_layers'" in msg and "1e+300" in msg


def test_the_bounds_themselves_are_accepted():
    cfg = parse_config(json.dumps(_bare(n_layers=MAX_LAYERS, n_mtp_layers=0, hc_mult=MAX_HC_MULT)), "b.json")
    assert (cfg.n_layers, cfg.hc_mult) == (MAX_LAYERS, MAX_HC_MULT)
    assert "'n_layers'" in _err(_bare(n_layers=MAX_LAYERS + 1))


@pytest.mark.parametrize("hc", [0, MAX_HC_MULT + 1, 4096, 10**9])
def test_hc_mult_bound(hc):
    msg = _err(_tiny(hc_mult=hc))
    assert "'hc_mult'" in msg


@pytest.mark.parametrize("key, value", [("dim", 2**21), ("n_routed_experts", 2**17), ("vocab_size", 2**25),
                                        ("hc_sinkhorn_iters", 10**6), ("head_dim", 10**12)])
def test_sizes_have_bounds(key, value):
    assert f"'{key}'" in _err(_tiny(**{key: value}))


def test_layers_times_experts_is_bounded():
    # each bound alone is fine; together they would imply ~100 M tensors
    msg = _err(_bare(n_layers=1000, n_routed_experts=60000, n_activated_experts=2))
    assert "'n_routed_experts'" in msg and "layers x routed experts" in msg


def test_hub_config_names_the_hub_key():
    d = json.loads((SAMPLES / "tiny-v4.1.hf.json").read_text())
    d["text_config"]["num_hidden_layers"] = 10**6
    assert "'text_config.num_hidden_layers'" in _err(d)


def test_long_lists_are_refused_before_their_entries_are_read():
    msg = _err(_tiny(compress_ratios=[0] * 100_000))
    assert "'compress_ratios'" in msg and "100,000 entries" in msg


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"n_layers": ' + "[" * 100_000 + "]" * 100_000 + "}"])
def test_deep_nesting(text):
    assert "nested deeper than 127 levels" in _err(text)


def test_5000_digit_integer_names_its_key():
    text = json.dumps(_tiny()).replace('"n_layers": 8', '"n_layers": ' + "9" * 5000)
    msg = _err(text)
    assert "'n_layers'" in msg and "5,000 digits" in msg and len(msg) < 300


def test_5000_digit_integer_in_an_unknown_key_is_tolerated():
    text = json.dumps(_tiny()).replace('"n_layers": 8', '"n_layers": 8, "whatever": ' + "9" * 5000)
    assert parse_config(text, "x.json").n_layers == 8


def test_float_beyond_range_names_its_key():
    text = json.dumps(_tiny()).replace('"hc_eps": 1e-06', '"hc_eps": 1e400')
    msg = _err(text)
    assert "'hc_eps'" in msg and "beyond float range" in msg


@pytest.mark.parametrize("value", [-1, 2.0, "1e-6"])
def test_eps_range(value):
    assert "'hc_eps'" in _err(_tiny(hc_eps=value))


# ---- files that are not config files -------------------------------------------------------------

def _cli_in_fresh_interpreter(*args, timeout=30):
    # a blocking open or an endless read would hang a test run: bound it from outside
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom hccli.cli.app import register\n"
            "r = CliRunner().invoke(register(), sys.argv[1:])\n"
            "sys.stdout.write(r.stderr); sys.exit(r.exit_code)\n")
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_config_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    out = _cli_in_fresh_interpreter("count-params", fifo)
    assert out.returncode == 2 and "FIFO" in out.stdout and str(fifo) in out.stdout
    out = _cli_in_fresh_interpreter("count-params", tmp_path)  # a directory whose config.json is a FIFO
    assert out.returncode == 2 and "FIFO" in out.stdout


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_is_refused():
    out = _cli_in_fresh_interpreter("count-params", "/dev/zero")
    assert out.returncode == 2 and "/dev/zero" in out.stdout and "character device" in out.stdout
    assert out.stdout.count("\n") == 1


@pytest.mark.parametrize("size", [MAX_CONFIG_BYTES + 1, 6 * 2**30])
def test_padded_config_is_refused_by_its_size(tmp_path, size):
    p = tmp_path / "config.json"
    with open(p, "wb") as f:  # sparse: costs no disk
        f.write(json.dumps(_tiny()).encode())
        f.truncate(size)
    start = time.perf_counter()
    with pytest.raises(HcError, match=f"at most {MAX_CONFIG_BYTES:,} bytes"):
        load_config(p)
    assert time.perf_counter() - start < 1


def test_config_just_under_the_cap_loads(tmp_path):
    p = tmp_path / "config.json"
    text = json.dumps(_tiny())
    p.write_text(text + " " * (MAX_CONFIG_BYTES - len(text)))
    assert load_config(p).n_layers == 8


# ---- model families without hyper-connections ---------------------------------------------------

DEEPSEEK_V3_HUB = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_nextn_predict_layers": 1,
}
DEEPSEEK_V3_INFERENCE = {
    "vocab_size": 129280, "dim": 7168, "inter_dim": 18432, "moe_inter_dim": 2048, "n_layers": 61,
    "n_dense_layers": 3, "n_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "n_activated_experts": 8,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "dtype": "fp8",
}
LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
}


@pytest.mark.parametrize("data, named", [
    (DEEPSEEK_V3_HUB, ["deepseek_v3", "DeepseekV3ForCausalLM"]),
    (DEEPSEEK_V3_INFERENCE, ["'hc_mult'"]),
    (LLAMA, ["llama", "LlamaForCausalLM"]),
    ({"model_type": "some_vlm", "text_config": {"model_type": "llama"}}, ["some_vlm", "llama"]),
])
def test_families_without_hyper_connections(tmp_path, data, named):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    r = run_hc("count-params", p, "--json")
    assert r.exit_code == 2 and r.stdout == ""
    assert "not a model family with hyper-connections" in r.stderr and len(r.stderr.splitlines()) == 1
    for word in named:
        assert word in r.stderr


def test_readme_states_the_bounds_the_code_holds():
    from hccli.model.config import bounds as b
    from hccli.cli.specs import MAX_LAYER_NUMBER

    page = (ROOT / "docs" / "security.md").read_text()
    section = page.split("\n## Config files\n", 1)[1].split("\n## ", 1)[0]
    for text in (f"{MAX_CONFIG_BYTES:,} bytes", f"| 1..{b.MAX_LAYERS:,} |", f"| 0..{b.MAX_STAGES} |",
                 f"`hc_mult` | 1..{b.MAX_HC_MULT} |", f"| 1..{b.MAX_SINKHORN_ITERS:,} |",
                 f"up to 2^{b.MAX_DIM.bit_length() - 1} |", f"up to 2^{b.MAX_COUNT.bit_length() - 1} |",
                 f"up to 2^{b.MAX_VOCAB.bit_length() - 1} |", f"up to 2^{b.MAX_ENGRAM_ROWS.bit_length() - 1} |",
                 f"up to {b.MAX_LAYER_EXPERTS:,} ", f"{MAX_LAYER_NUMBER:,} (the last"):
        assert text in section, text


def test_run_kernel_config_with_a_billion_streams_is_refused_before_any_allocation(tmp_path):
    p = tmp_path / "hc.json"
    p.write_text(json.dumps(_tiny(hc_mult=10**9)))
    r = run_hc("run-kernel", "--config", p)
    assert r.exit_code == 2 and "'hc_mult'" in r.stderr and f"at most {MAX_HC_MULT}" in r.stderr
