"""A tiny llama.cpp-style GGUF (architecture deepseek4) of a checkpoint `hc make-checkpoint`
wrote, made with the gguf package's own writer (GGUFWriter): every HC tensor under its GGUF
name, each `hc_*_fn` in F16 but layer 1's FFN one in Q8_0, the rest F32, as llama.cpp's
converter leaves HC tensors (no transpose). The stages (`mtp.*`) are left out, as llama.cpp
does. For trying `hc inspect --verify`, `hc diff` and `hc run-kernel --checkpoint` on a GGUF.

    python docs/examples/tiny_gguf.py CHECKPOINT OUT.gguf
"""

import json
import re
import sys
from pathlib import Path

import gguf
import numpy as np
from safetensors import safe_open

src, out = Path(sys.argv[1]), sys.argv[2]
cfg = json.loads((src / "config.json").read_text())
text = cfg.get("text_config", cfg)
hc = {}
for shard in sorted(src.glob("*.safetensors")):
    with safe_open(shard, framework="numpy") as f:
        hc.update({k: f.get_tensor(k) for k in f.keys() if re.match(r"(layers\.\d+\.)?hc_", k)})

w = gguf.GGUFWriter(out, "deepseek4")
w.add_uint32("deepseek4.block_count", text["num_hidden_layers"])
w.add_uint32("deepseek4.embedding_length", text["hidden_size"])
w.add_uint32("deepseek4.hyper_connection.count", text["hc_mult"])
w.add_uint32("deepseek4.hyper_connection.sinkhorn_iterations", text["hc_sinkhorn_iters"])
w.add_float32("deepseek4.hyper_connection.epsilon", text["hc_eps"])
w.add_array("deepseek4.attention.compress_ratios", text["compress_ratios"][:text["num_hidden_layers"]])
w.add_tensor("token_embd.weight", np.ones((text["vocab_size"], text["hidden_size"]), np.float16))
for name, x in sorted(hc.items()):
    m = re.match(r"layers\.(\d+)\.hc_(\w+)$", name)
    gname = f"blk.{m[1]}.hc_{m[2]}.weight" if m else f"output_hc_{name.rsplit('_', 1)[1]}.weight"  # the head mix
    if name == "layers.1.hc_ffn_fn":
        w.add_tensor(gname, gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0),
                     raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    else:
        w.add_tensor(gname, x.astype(np.float16) if name.endswith("_fn") else x)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"wrote {out}: {len(hc) + 1} tensors")
