"""Every command's `--json` documents, in each of its modes, validated against docs/schemas/ (JSON
Schema draft 2020-12): one envelope first (schema_version, command, exit_code, verdict where the
command judges, warnings, findings), then the command's own keys, nothing undocumented; exit_code
is the process's own; the schemas are what tests/cli/json_schemas.py writes from the result types."""

from __future__ import annotations

import contextlib
import json
import re

import jsonschema
import numpy as np
import pytest
from referencing import Registry, Resource

from ckpt_tools import tiny
from conftest import ROOT, SAMPLES, run_hc, run_hc_process
from json_schemas import COMMANDS, ENVELOPE, all_schemas, schema_file, text

SCHEMAS = ROOT / "docs" / "schemas"
ENVELOPE_KEYS = ["schema_version", "command", "exit_code", "verdict", "warnings", "findings"]
try:
    import torch  # noqa: F401 - run-kernel, bench and run-site's torch paths
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


def _validator(command: str) -> jsonschema.Draft202012Validator:
    registry = Registry().with_resources(
        (p.name, Resource.from_contents(json.loads(p.read_text()))) for p in SCHEMAS.glob("*.schema.json"))
    schema = json.loads((SCHEMAS / schema_file(command)).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def check_document(command: str, r) -> dict:
    """r: a finished `hc ... --json`. Its document, after checking it against the command's schema."""
    assert r.stdout.strip(), (r.exit_code, r.stderr)
    doc = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    errors = sorted(_validator(command).iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message[:300]}" for e in errors[:10])
    assert doc["command"] == command and doc["exit_code"] == r.exit_code, (doc["exit_code"], r.exit_code, r.stderr)
    assert list(doc)[:len(ENVELOPE_KEYS) - ("verdict" not in doc)] == [k for k in ENVELOPE_KEYS if k in doc]
    # the warnings are the `warning:` lines on stderr, said the same way
    said = [line.removeprefix("warning: ") for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert doc["warnings"] == said, (doc["warnings"], r.stderr)
    return doc


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Tiny checkpoints (whole, another seed, a shard gone, no index), golden site and kernel vectors,
    and ports that match them and depart from them."""
    root = tmp_path_factory.mktemp("schemas")
    p = {"root": root, "tiny": tiny(root / "tiny"), "other": tiny(root / "other", seed=1),
         "v4": tiny(root / "v4", config="tiny-v4.hf.json")}
    broken = tiny(root / "broken")
    next(iter(sorted(broken.glob("model-*.safetensors")))).unlink()
    p["broken"] = broken
    noindex = tiny(root / "noindex")
    (noindex / "model.safetensors.index.json").unlink()
    p["noindex"] = noindex
    mismatch = tiny(root / "mismatch")  # a config.json of another model beside it: set aside, and a finding
    (mismatch / "config.json").write_text((SAMPLES / "tiny-v4.hf.json").read_text())
    p["mismatch"] = mismatch
    r = run_hc("run-site", p["tiny"], "--layers", "0-1", "--tokens", "4", "--save", root / "golden.safetensors")
    assert r.exit_code == 0, r.stderr
    p["golden"] = root / "golden.safetensors"
    from safetensors.numpy import load_file, save_file

    steps = {k: v for k, v in load_file(str(p["golden"])).items() if k.endswith(".comb")}
    save_file({k: v * np.float32(2) for k, v in steps.items()}, str(root / "departs.safetensors"))
    p["departs"] = root / "departs.safetensors"
    if HAVE_TORCH:
        r = run_hc("run-kernel", "--impl", "torch", "--device", "cpu", "--save", root / "kernel.safetensors")
        assert r.exit_code == 0, r.stderr
        p["kernel"] = root / "kernel.safetensors"
    return p


TORCH = "torch"  # an invocation that needs torch: skipped, saying so, where it is missing

# (label, command, arguments with {placeholders} of `made`, exit code, verdict or None, needs)
INVOCATIONS = [
    ("count-params", "count-params", [], 0, None, None),
    ("count-params selection", "count-params", ["--layers", "3-7", "--site", "attn", "--component", "comb"], 0,
     None, None),
    ("count-params --model --by-layer", "count-params", ["--model", "--by-layer", "--stages"], 0, None, None),
    ("count-params v4", "count-params", [str(SAMPLES / "tiny-v4.hf.json"), "--model"], 0, None, None),
    ("make-checkpoint", "make-checkpoint", [str(SAMPLES / "tiny-v4.1.json"), "{root}/made"], 0, None, None),
    ("make-checkpoint --phantom", "make-checkpoint", [str(SAMPLES / "tiny-v4.hf.json"), "{root}/ph", "--phantom"], 0,
     None, None),
    ("inspect", "inspect", ["{tiny}"], 0, None, None),
    ("inspect v4", "inspect", ["{v4}"], 0, None, None),
    ("inspect --verify", "inspect", ["{tiny}", "--verify"], 0, "ok", None),
    ("inspect --verify warnings", "inspect", ["{noindex}", "--verify"], 0, "warnings", None),
    ("inspect --verify errors", "inspect", ["{broken}", "--verify"], 1, "errors", None),
    ("inspect damaged", "inspect", ["{broken}"], 0, None, None),
    ("inspect --tensors", "inspect", ["{tiny}", "--tensors", "--limit", "3"], 0, None, None),
    ("inspect --name --layers", "inspect", ["{tiny}", "--name", "*.hc_attn_*", "--dtype", "F32"], 0, None, None),
    ("inspect --hc", "inspect", ["{tiny}", "--layers", "3", "--hc"], 0, None, None),
    ("inspect --stats", "inspect", ["{tiny}", "--stats"], 0, None, None),
    ("inspect --metadata", "inspect", ["{tiny}", "--metadata"], 0, None, None),
    ("diff identical", "diff", ["{tiny}", "{tiny}"], 0, "identical", None),
    ("diff --values all", "diff", ["{tiny}", "{tiny}", "--values", "all"], 0, "identical", None),
    ("diff differs", "diff", ["{tiny}", "{other}"], 1, "differs", None),
    ("diff within tolerance", "diff", ["{tiny}", "{other}", "--atol", "100"], 0, "within_tolerance", None),
    ("diff another model's config", "diff", ["{tiny}", "{mismatch}"], 0, "identical", None),
    ("diff damaged side", "diff", ["{tiny}", "{broken}"], 2, None, None),  # refused: no document
    ("run-site", "run-site", ["{tiny}", "--layers", "0-1", "--tokens", "4"], 0, None, None),
    ("run-site config", "run-site", [str(SAMPLES / "tiny-v4.hf.json"), "--tokens", "2", "--precision", "bf16"], 0,
     None, None),
    ("run-site --compare", "run-site", ["--compare", "{golden}"], 0, "identical", None),
    ("check-port matches", "check-port", ["{golden}", "--golden", "{golden}"], 0, "matches", None),
    ("check-port departs", "check-port", ["{departs}", "--golden", "{golden}"], 1, "departs", None),
    ("run-kernel", "run-kernel", ["--impl", "torch", "--device", "cpu"], 0, None, TORCH),
    ("run-kernel --checkpoint --hidden", "run-kernel", ["--impl", "torch", "--device", "cpu", "--checkpoint", "{tiny}",
                                                        "--layers", "3", "--hidden"], 0, None, TORCH),
    ("run-kernel --compare", "run-kernel", ["--compare", "{kernel}", "--impl", "torch", "--device", "cpu"], 0,
     "identical", TORCH),
    ("bench", "bench", ["--device", "cpu", "--tokens", "4", "--reps", "1", "--warmup", "0", "--iters", "2",
                        "--host"], 0, None, TORCH),
]


@pytest.mark.parametrize("label, command, args, code, verdict, needs", INVOCATIONS, ids=[i[0] for i in INVOCATIONS])
def test_every_document_fits_its_schema(made, label, command, args, code, verdict, needs):
    if needs == TORCH and not HAVE_TORCH:
        pytest.skip("needs torch")
    argv = [a.format(**{k: str(v) for k, v in made.items()}) for a in args]
    r = run_hc(*command.split(), *argv, "--json")
    if code is not None:
        assert r.exit_code == code, (r.exit_code, r.stdout[-500:], r.stderr)
    if r.exit_code == 2 and not r.stdout:  # refused: an error line, and no document (nothing to validate)
        assert r.stderr.startswith("hc: error: ")
        return
    doc = check_document(command, r)
    assert doc.get("verdict") == verdict, doc.get("verdict")


def test_each_kind_of_finding_and_warning_lands_in_the_envelope(made):
    # a missing shard: a warning line on stderr and a finding, in the one envelope; --verify: findings only
    r = run_hc("inspect", made["broken"], "--json")
    doc = check_document("inspect", r)
    assert [f["code"] for f in doc["findings"]] == ["missing_shard"] and len(doc["warnings"]) == 1
    # diff: both sides' findings in the envelope, each saying its side; findings_a/_b as they were
    doc = check_document("diff", run_hc("diff", made["tiny"], made["mismatch"], "--json"))
    assert [(f["code"], f["side"]) for f in doc["findings"]] == [("config_mismatch", "b")]
    assert doc["findings_a"] == [] and len(doc["warnings"]) == 1
    assert [{k: v for k, v in f.items() if k != "side"} for f in doc["findings"]] == doc["findings_b"]
    # run-site: a finding and a warning of its own
    doc = check_document("run-site", run_hc("run-site", made["mismatch"], "--layers", "0", "--tokens", "2", "--json"))
    assert [f["code"] for f in doc["findings"]] == ["config_mismatch"] and len(doc["warnings"]) == 1


def test_the_exit_code_is_the_process_own(made):
    # the envelope's exit_code against a real process's status, where it judges 1 and 0
    for args, code in ((("diff", made["tiny"], made["other"]), 1), (("inspect", made["broken"], "--verify"), 1),
                       (("count-params",), 0)):
        proc, _, _ = run_hc_process(*args, "--json")
        assert proc.returncode == code, proc.stderr
        assert json.loads(proc.stdout)["exit_code"] == code


def test_the_cache_and_a_hub_checkpoint(made, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from hub_server import Hub

    monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
    check_document("cache list", run_hc("cache", "list", "--json"))  # empty
    with Hub({"org/one": made["tiny"]}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        doc = check_document("inspect", run_hc("inspect", "hf://org/one", "--json"))
        assert doc["remote"]["repo"] == "org/one"
    doc = check_document("cache list", run_hc("cache", "list", "--json"))
    assert doc["files"]
    check_document("cache clear", run_hc("cache", "clear", "org/one", "--yes", "--json"))
    check_document("cache clear", run_hc("cache", "clear", "--dry-run", "--json"))
    check_document("cache clear", run_hc("cache", "clear", "--yes", "--json"))


def test_the_site_benchmark_fits_its_schema():
    # bench --op site-* runs on a GPU only (test_bench_gpu runs it there): its result object here
    from hccli.bench.op import Machine
    from hccli.bench.site import SiteBenchResult, SiteBenchRow
    from hccli.cli import output

    class Said:  # what run_hc's result offers check_document
        exit_code, stderr = 0, ""

    m = Machine("cuda:0", "NVIDIA H200", "580", {"torch": "2"}, "now")
    row = SiteBenchRow("site_pre", "delayed", 16, 0.01, 0.009, 1, 15, 1.6e6, 80.0, 2.0, 1.5,
                       {"pre": 1e-7, "h": float("nan")}, {"h": 0.5}, {"pre": True})
    site = SiteBenchResult("site-pre", m, 4, 5120, "bfloat16", 20, 1e-6, 1e-20, 51280, float("inf"), "median", (row,),
                           {"tilekernels": "tile_kernels does not import"})
    output.begin_invocation()
    Said.stdout = json.dumps(output.json_document(site, "bench"), allow_nan=False)
    check_document("bench", Said)


def test_every_command_is_run_and_has_its_schema():
    ran = {i[1] for i in INVOCATIONS} | {"cache list", "cache clear"}
    assert ran == set(COMMANDS)
    from hccli.cli.app import COMMANDS as registered

    assert {c.split()[0] for c in COMMANDS} == set(registered)
    assert sorted(p.name for p in SCHEMAS.glob("*.json")) == sorted([ENVELOPE, *map(schema_file, COMMANDS)])


def test_the_schemas_are_written_from_the_result_types():
    # a field added, or its type changed, shows here first: `python tests/cli/json_schemas.py` rewrites them
    import difflib

    for name, schema in all_schemas().items():
        have, want = (SCHEMAS / name).read_text(), text(schema)
        diff = "".join(list(difflib.unified_diff(have.splitlines(True), want.splitlines(True), name, "written"))[:40])
        assert have == want, f"docs/schemas/{name} is stale:\n{diff}"


def test_the_verdicts_are_documented():
    # docs/json.md's vocabulary of verdicts is the schemas' (and the result classes')
    section = (ROOT / "docs" / "json.md").read_text()
    for command in COMMANDS:
        words = set()
        for body in json.loads((SCHEMAS / schema_file(command)).read_text())["$defs"].values():
            words |= set((body.get("properties", {}).get("verdict") or {}).get("enum", ()))
        for word in words:
            assert re.search(rf"`{re.escape(word)}`", section), (command, word)
