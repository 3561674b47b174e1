"""A GGUF's model settings as `hc` reads them: block_count, embedding_length, the
hyper_connection keys and the norm epsilon of its metadata, each held to the bound the
same setting has in a config (model/config/bounds.py) and read by the config's own typed keys
(model/config/keys.py's KeySpace). inspect, --verify, run-kernel and diff all read them here, so a
value out of range is the same one error everywhere, naming the file, the key and the
bound. A key that is absent is None: the caller says which default it uses.
"""

from __future__ import annotations

from typing import Any

from hccli.model.config.bounds import FLOATS, SCALARS
from hccli.model.config.keys import KeySpace
from dataclasses import dataclass

# the GGUF key (after "{arch}.") -> the config key whose bound it is held to
INT_KEYS = {
    "block_count": "n_layers",
    "embedding_length": "dim",
    "hyper_connection.count": "hc_mult",
    "hyper_connection.sinkhorn_iterations": "hc_sinkhorn_iters",
}
FLOAT_KEYS = {"hyper_connection.epsilon": "hc_eps", "attention.layer_norm_rms_epsilon": "norm_eps"}


@dataclass(frozen=True, slots=True)
class GgufModel:
    source: str  # the file whose metadata says it
    arch: str
    n_layers: int | None
    dim: int | None
    hc_mult: int | None
    iters: int | None
    eps: float | None
    norm_eps: float | None

    def key(self, config_key: str) -> str:
        """The metadata key that sets a config key, as the file spells it."""
        gguf_key = next(k for k, v in (*INT_KEYS.items(), *FLOAT_KEYS.items()) if v == config_key)
        return f"{self.arch}.{gguf_key}"


def read_model(source: str, arch: str, settings: dict[str, Any]) -> GgufModel:
    """The settings of one GGUF's metadata (`settings`: its `{arch}.*` keys, prefix removed)."""
    ks = KeySpace({}, source)
    for gguf_key, key in (*INT_KEYS.items(), *FLOAT_KEYS.items()):
        if gguf_key in settings:
            ks.values[key] = settings[gguf_key]
            ks.origin[key] = f"{arch}.{gguf_key}"
    ints = {key: ks.int(key, *SCALARS[key][:3]) if ks.has(key) else None for key in INT_KEYS.values()}
    floats = {key: ks.float(key, *FLOATS[key]) if ks.has(key) else None for key in FLOAT_KEYS.values()}
    return GgufModel(source, arch, ints["n_layers"], ints["dim"], ints["hc_mult"], ints["hc_sinkhorn_iters"],
                     floats["hc_eps"], floats["norm_eps"])
