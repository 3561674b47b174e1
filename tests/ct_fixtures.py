"""Checkpoints made by compressed-tensors itself (the real producer of llm-compressor's saves),
for the dialect tests: a tiny DeepseekV4ForCausalLM quantised and saved the way
`ModelCompressor`'s docstring gives llm-compressor's save (`from_pretrained_model`,
`compress_model`, transformers' `save_pretrained`, `update_config`).

llm-compressor itself is not used: its releases pin older transformers and compressed-tensors
than the test extra holds (docs/DIALECTS.md). Its `oneshot` with a weight-only scheme and no
calibration set does what is done here: apply the scheme, let the observers set each weight's
scale and zero point from its min and max (compressed-tensors' `calculate_qparams`), freeze.
compressed-tensors and transformers are test dependencies only; tests that use these skip
without them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from transformers_fixtures import save_tiny_model

SCHEMES = ("W4A16", "W8A8")  # pack-quantized (weight_packed, weight_shape) and int-quantized (weight int8)
GROUP_SIZE = 32  # the tiny model's widths are 32 and 64; the W4A16 preset's 128 fits none of them


def compressed_tensors():
    return pytest.importorskip("compressed_tensors", reason="compressed-tensors is not installed "
                               "(pip install compressed-tensors; the test extra holds it)")


def _quantiser(scheme: str):
    compressed_tensors()
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationConfig,
        QuantizationStatus,
        apply_quantization_config,
        preset_name_to_scheme,
    )
    from compressed_tensors.quantization.utils import calculate_qparams

    def prepare(model):
        chosen = preset_name_to_scheme(scheme, ["Linear"])
        if chosen.weights.strategy == "group":
            chosen.weights.group_size = GROUP_SIZE
        config = QuantizationConfig(config_groups={"group_0": chosen}, ignore=["lm_head"],
                                    quantization_status=QuantizationStatus.INITIALIZED)
        apply_quantization_config(model, config, show_progress=False)
        with torch.no_grad():
            for module in model.modules():
                qs = getattr(module, "quantization_scheme", None)
                if qs is None:
                    continue
                w = module.weight
                if qs.weights.strategy == "group":
                    w = w.unflatten(-1, (-1, qs.weights.group_size))
                scale, zp = calculate_qparams(w.amin(-1), w.amax(-1), qs.weights)
                module.weight_scale.copy_(scale.reshape(module.weight_scale.shape))
                module.weight_zero_point.copy_(zp.reshape(module.weight_zero_point.shape))
                module.quantization_status = QuantizationStatus.FROZEN
        compressor = ModelCompressor.from_pretrained_model(model)
        compressor.compress_model(model)
        return lambda out: compressor.update_config(str(out))

    return prepare


def save_compressed(out: Path, scheme: str = "W4A16", seed: int = 0):
    """(the model as it was quantised, the folder): tiny-v4.hf.json through the scheme."""
    return save_tiny_model(out, seed=seed, prepare=_quantiser(scheme))
