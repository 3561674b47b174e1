"""A tiny DeepseekV4ForCausalLM saved by transformers' own save_pretrained, from the bundled
sample_configs/tiny-v4.hf.json, with random HC base and scale values (transformers'
initialiser leaves them 0 and 1). For trying `hc inspect`, `hc diff` and `hc run-site` on
the layout a transformers save writes. Needs transformers with the DeepseekV4 model, and torch.

    python docs/examples/tiny_transformers_save.py OUTDIR
"""

import json
import sys
from pathlib import Path

import torch
import transformers

config = json.loads((Path(__file__).parents[2] / "sample_configs" / "tiny-v4.hf.json").read_text())
config.pop("quantization_config")  # a tiny CPU model holds no FP8 weights
torch.manual_seed(0)
model = transformers.DeepseekV4ForCausalLM._from_config(transformers.DeepseekV4Config(**config),
                                                        dtype=torch.bfloat16)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith(("_hc.base", "_hc.scale", "hc_head.hc_base", "hc_head.hc_scale")):
            p.copy_(torch.randn_like(p))
model.save_pretrained(sys.argv[1])
print(f"wrote {sys.argv[1]}")
