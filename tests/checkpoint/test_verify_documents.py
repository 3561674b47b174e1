"""Whole `inspect --verify --json` documents of three damaged checkpoints, held byte for byte to the
documents the code wrote before verification became one pass over the checkpoint's facts
(verify_documents/*.json, the path of the checkpoint written as <ck>): a tiny release with a shard
gone, a .partial file and the config of another model; a transformers save held to the config of
another model; a GGUF whose HC tensors are stored F16 and Q8_0. A change to a message,
a cause, an order or a cap shows here as a diff of the document.

HC_WRITE_VERIFY_DOCUMENTS=1 writes them anew (only where a change of wording is meant)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ckpt_tools import tiny
from conftest import SAMPLES, run_hc

GOLDEN = Path(__file__).parent / "verify_documents"


def release(tmp: Path) -> tuple[Path, list[str]]:
    ck = tiny(tmp / "ck")
    (ck / "model-00003-of-00014.safetensors").unlink()
    (ck / "model-00009-of-00014.safetensors.partial").write_bytes(b"")
    return ck, ["--config", str(SAMPLES / "tiny-v4.hf.json")]


def transformers_save(tmp: Path) -> tuple[Path, list[str]]:
    from transformers_fixtures import save_tiny_model

    _, ck = save_tiny_model(tmp / "ck")
    return ck, ["--config", str(SAMPLES / "tiny-v4.1.hf.json")]


def gguf_file(tmp: Path) -> tuple[Path, list[str]]:
    from gguf_fixtures import hc_values, write_gguf

    (tmp / "ck").mkdir()
    write_gguf(tmp / "ck" / "model.gguf", hc_values())
    return tmp / "ck", []


CASES = {"release": release, "transformers": transformers_save, "gguf": gguf_file}


@pytest.mark.parametrize("case", list(CASES))
def test_the_verify_document_is_unchanged(case, tmp_path):
    ck, extra = CASES[case](tmp_path)
    r = run_hc("inspect", str(ck), *extra, "--verify", "--json")
    assert r.exit_code in (0, 1), r.stderr
    text = r.stdout.replace(str(ck), "<ck>").replace(str(SAMPLES), "<samples>")
    path = GOLDEN / f"{case}.json"
    if os.environ.get("HC_WRITE_VERIFY_DOCUMENTS") == "1":
        path.write_text(text)
    assert text == path.read_text()
    assert json.loads(text)["findings"]  # each case is damaged: a document of no finding pins little
