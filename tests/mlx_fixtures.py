"""Checkpoints made by mlx-lm itself (the real producer), for the dialect tests: a tiny V4.1
release written by `hc make-checkpoint` (hccli.checkpoint.synth), converted as `mlx_lm.convert` does it
(`mlx_lm.utils.load_model`, optionally `quantize_model`, then `save_model` and `save_config`).

The release's config is sample_configs/tiny-v4.1.hf.json without its Engram keys:
mlx-lm 0.32's deepseek_v41 `ModelArgs.__post_init__` refuses a config with `engram_layer_ids`
("this implementation does not have" Engram). Everything else of the tiny config loads as it is
(8 layers, dim 64, 8 experts, 2 DSpark stages, a vision tower). mlx and mlx-lm are test
dependencies only (Linux and macOS); tests that use these skip without them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import SAMPLES

from hccli.checkpoint.synth import make_checkpoint


def mlx_lm_utils():
    pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'mlx[cpu]' mlx-lm; Linux, macOS)")
    return pytest.importorskip("mlx_lm.utils", reason="mlx-lm is not installed (pip install mlx-lm)")


def release_config() -> dict:
    cfg = json.loads((SAMPLES / "tiny-v4.1.hf.json").read_text())
    cfg["text_config"] = {k: v for k, v in cfg["text_config"].items() if not k.startswith("engram_")}
    return cfg


def release(out: Path, seed: int = 0) -> Path:
    """The tiny V4.1 release (no Engram), with values, as make-checkpoint writes it."""
    out.mkdir(parents=True)
    src = out / "config.json"
    src.write_text(json.dumps(release_config(), indent=1))
    ckpt = out / "release"
    make_checkpoint(src, ckpt, seed=seed)
    return ckpt


def convert(src: Path, out: Path, bits: int | None = None) -> Path:
    """`src` as mlx-lm saves it: loaded (its fp8/fp4 weights stay packed, mxfp8/mxfp4) and, with
    bits, quantised by quantize_model (affine, mlx-lm's default group size)."""
    utils = mlx_lm_utils()
    model, config = utils.load_model(src)
    if bits is not None:
        model, config = utils.quantize_model(model, config, group_size=None, bits=bits)
    utils.save_model(out, model)
    utils.save_config(copy.deepcopy(config), out / "config.json")
    return out


def release_and_conversions(root: Path) -> dict[str, Path]:
    """The release checkpoint and mlx-lm's two conversions of it: plain, and quantised to 4 bits."""
    mlx_lm_utils()
    rel = release(root / "src")
    return {"release": rel, "plain": convert(rel, root / "plain"), "q4": convert(rel, root / "q4", bits=4)}
