"""The table of bounds (docs/security.md, "Bounds at a glance") says what the code enforces:
each figure is read back from the constant it names, so editing either alone fails here."""

import re

from conftest import ROOT

from hccli.base import bounded, safe_write, vocab
from hccli.checkpoint import source as sources
from hccli.diffing import values as diff_values
from hccli.inspecting import hc as inspect_hc, meta as inspect_meta, stats as inspect_stats
from hccli.cli import output
from hccli.model.config import bounds as config_bounds, quant as config_quant, read as config_read
from hccli.checkpoint.remote import cache
from hccli.checkpoint.verify import causes, findings, checks as verify
from hccli.checkpoint.gguf import prescan as gguf_file, store as gguf_store
from hccli.checkpoint import hc, store
from hccli.checkpoint.safetensors import header_types
from hccli.base import limits
from hccli.bench import op as bench


BOUNDS_PAGE = ROOT / "docs" / "security.md"


def _row(text: str, what: str) -> str:
    m = re.search(r"^\| " + re.escape(what) + r" \| ([^|]+) \|", text, re.M)
    assert m, what
    return m.group(1)


def test_bounds_table_matches_the_code():
    text = BOUNDS_PAGE.read_text()
    n = "{:,}".format
    rows = {
        "a safetensors header": [n(header_types.MAX_HEADER_SIZE), str(bounded.MAX_JSON_DEPTH)],
        "JSON read from a file or server": [str(bounded.MAX_JSON_DEPTH), str(bounded.MAX_INT_DIGITS)],
        "an index file read whole": [n(store.INDEX_CAP)],
        "a config.json read whole": [n(config_read.MAX_CONFIG_BYTES)],
        "shard files in a listing or index": [n(store.MAX_SHARDS)],
        "residual streams (hc_mult)": [str(vocab.MAX_HC_MULT)],
        "Sinkhorn iterations": [n(vocab.MAX_SINKHORN_ITERS)],
        "`hc_*_fn` values `--verify` reads (in 8 MiB chunks)": [n(verify.FN_READ_BUDGET)],
        "values in one array `run-kernel` reads or builds": [n(limits.MAX_ELEMENTS)],
        "sample hidden states `diff` sends through each site": [n(limits.MAX_ELEMENTS)],
        "values `diff --values all` decodes at a time": [n(diff_values.CHUNK_ELEMENTS), str(diff_values.VALUE_THREADS),
                                                         n(sources.LocalFile.chunk_bytes),
                                                         n(sources.ByteSource.chunk_bytes)],
        "JSON mixes": [n(limits.MAX_JSON_BYTES), str(limits.MAX_JSON_DIGITS)],
        "a GGUF header (metadata and tensor infos)": [n(gguf_file.MAX_HEADER_BYTES), n(gguf_file.MAX_TENSORS),
                                                      n(gguf_store.MAX_ARRAY), n(gguf_store.MAX_KEY_BYTES),
                                                      n(gguf_file.KEPT_METADATA_BYTES)],
        "a GGUF's model settings": [n(config_bounds.MAX_LAYERS), n(config_bounds.MAX_DIM), str(vocab.MAX_HC_MULT),
                                    n(vocab.MAX_SINKHORN_ITERS)],
        "HC sites in a checkpoint": [n(hc.MAX_HC_SITES)],
        "findings of one code `--verify` lists": [n(findings.MAX_FINDINGS_PER_CODE)],
        "HC values `inspect` reads and reports": [n(inspect_hc.MAX_INSPECT_VALUES), n(inspect_hc.PLAIN_SPLIT_BUDGET)],
        "entries `hc cache list` and `clear` walk": [n(cache.MAX_CACHE_ENTRIES), n(cache.META_PREFIX),
                                                   n(cache.REF_CAP)],
        "a file written (`--plot`, `--save`, a cache entry)": [n(safe_write.TMP_TRIES), n(safe_write.MAX_WALK)],
        "entries of a config's quantisation block": [n(config_quant.MAX_QUANT_ENTRIES)],
        "the streams of one token count `hc bench --op site-*` builds": [n(limits.MAX_SITE_BENCH_BYTES)],
        "what one token count of `hc bench` holds at once, estimated before anything is built":
            [n(limits.MAX_BENCH_BYTES), n(limits.MAX_CPU_BENCH_BYTES), str(bench.PEAK_OUTPUTS)],
        "the torch reference's work in one `hc bench` run (tokens x hc^2 x iterations, over every call)":
            [n(limits.MAX_GPU_BENCH_WORK), n(limits.MAX_CPU_BENCH_WORK)],
        "`hc bench`'s samples and calls": [n(limits.MAX_BENCH_REPS), str(limits.MAX_BENCH_WARMUP),
                                           str(limits.MAX_BENCH_POINTS)],
        "HC tensor values `inspect --stats` reads": [n(inspect_stats.MAX_STATS_BYTES),
                                                     n(inspect_stats.STATS_CHUNK_ELEMENTS)],
        "a file's metadata `inspect --metadata` shows": [n(inspect_meta.MAX_METADATA_KEYS),
                                                         n(inspect_meta.MAX_METADATA_CHARS),
                                                         n(inspect_meta.MAX_METADATA_ITEMS)],
        "follow-ons named under a root cause": [str(findings.FIRST_NAMES_SHOWN), str(causes.OWNERS_NAMED)],
        "`COLUMNS` taken": [n(output._PIPE_WIDTH)],
    }
    for what, figures in rows.items():
        cell = _row(text, what)
        for fig in figures:
            assert re.search(r"(?<![\d,])" + re.escape(fig) + r"(?!\d|,\d)", cell), (what, fig, cell)
