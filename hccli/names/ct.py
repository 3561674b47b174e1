"""compressed-tensors' spelling of a transformers save (docs/DIALECTS.md, section compressed-tensors).

A model quantised with compressed-tensors (directly, or through llm-compressor's `oneshot`) is
saved by transformers' `save_pretrained`, so its names are transformers-saved names
(dialects.TRANSFORMERS_SAVED), except that each quantised module's `weight` is replaced by what
its compressor writes. Read from compressed-tensors 0.20.1:

- `compressors/pack_quantized/base.py` `PackedQuantizationCompressor.compression_param_names`
  (format "pack-quantized", W4A16 and the other sub-8-bit int schemes): `weight_packed` (int32
  words, 32 values in `num_bits` words: `pack_to_int32`), `weight_scale`, `weight_shape` (the
  weight's [out, in], int64), `weight_zero_point` when asymmetric, `input_global_scale`;
- `compressors/naive_quantized/base.py` (int-quantized, float-quantized: W8A8, FP8): `weight`
  in the quantised dtype, `weight_scale`, `weight_zero_point` when asymmetric;
- `compressors/nvfp4/base.py`, `compressors/mxfp4/base.py`: `weight_packed` (uint8, two values a
  byte), `weight_scale`, `weight_global_scale` (nvfp4), `input_global_scale`;
- `quantization/lifecycle/initialize.py` `initialize_module_for_quantization`: static activation
  parameters `{input,output}_{scale,zero_point}` beside the weight's.
"""

from __future__ import annotations

# suffix (after the module path) -> role; "weight" roles stand for the module's weight
SUFFIXES = {
    "weight_packed": "weight",
    "weight_scale": "scales",
    "weight_shape": "weight_shape",
    "weight_zero_point": "zero_point",
    "weight_global_scale": "global_scale",
    "input_scale": "activation",
    "input_zero_point": "activation",
    "input_global_scale": "activation",
    "output_scale": "activation",
    "output_zero_point": "activation",
}
_ENDINGS = tuple("." + s for s in SUFFIXES)


def split(name: str) -> tuple[str, str, str] | None:
    """A stored compressed-tensors name -> (the transformers-saved name of the module's weight,
    role, the suffix as stored); None for any name that is not a compressor's (it then reads
    as transformers-saved)."""
    module, dot, suffix = name.rpartition(".")
    role = SUFFIXES.get(suffix) if dot else None
    if role is None:
        return None
    return f"{module}.weight", role, suffix


def votes_for(name: str) -> bool:
    """Whether a name is a compressed-tensors compressor's: no other producer writes these."""
    return name.endswith(_ENDINGS)
