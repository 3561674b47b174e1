"""Where a checkpoint's files live: the local store, and the store for what the user named (a
local path, or a hub repository: remote.py). The protocol both follow is store_protocol.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

from hccli.base.bounded import SourceError, one_line, read_small_file
from hccli.checkpoint.source import ByteSource, LocalFile
from hccli.checkpoint.store_protocol import Store
from hccli.model.config.keys import HUB_KEYS
from hccli.base.errors import HcError
from hccli.model.config.read import MAX_CONFIG_BYTES
from hccli.base.vocab import INDEX_NAME

# Files read whole: the index of the largest public checkpoints is ~10 MB, a config ~10 KB.
INDEX_CAP = 64 * 1024 * 1024
# A listing or an index naming more shard files than this is refused (the largest public
# checkpoints have a few hundred; huggingface.js's shard names allow five digits of them).
MAX_SHARDS = 4096


class LocalStore(Store):
    """A directory on disk (a single file is a directory store asked for one name)."""

    def __init__(self, root: Path):
        self.root = root
        self.label = str(root)

    def files(self) -> list[str]:
        try:
            # every entry, FIFOs and devices included: a shard that cannot be read is named, never skipped
            return sorted(e.name for e in os.scandir(self.root))
        except OSError as exc:
            raise HcError(f"{one_line(str(self.root))}: cannot list ({one_line(exc.strerror or str(exc))})") from None

    def exists(self, name: str) -> bool:
        return os.path.lexists(self.root / name)

    def source(self, name: str, size: int | None = None) -> ByteSource:
        return LocalFile(self.root / name)

    def read_small(self, name: str, cap: int, expected: str) -> bytes | None:
        return read_small_file(self.root / name, cap, expected)

    def display(self, name: str) -> str:
        return str(self.root / name)


class Opened(NamedTuple):
    store: Store
    kind: str  # "directory" | "index" | "file" | "hub"
    entry: str  # the index name to look for, the index file, or the one file
    label: str  # what messages call the checkpoint: the path as typed, or the hub repository


def open_store(text: str) -> Opened:
    """The store for what the user named, and where in it to start.

    A local path wins; a name that exists nowhere locally is tried on the hub only when it
    reads as org/name, and then the error says both."""
    if text.startswith("hf://"):
        from hccli.checkpoint.remote.hub import open_hub, parse_repo_spec

        hub = open_hub(parse_repo_spec(text, bare_allowed=True))  # type: ignore[arg-type]
        return Opened(hub, "hub", INDEX_NAME, hub.label)
    p = Path(text)
    if os.path.lexists(p):
        if p.is_dir():
            return Opened(LocalStore(p), "directory", INDEX_NAME, text)
        return Opened(LocalStore(p.parent), "index" if p.suffix == ".json" else "file", p.name, text)
    from hccli.checkpoint.remote.hub import open_hub, parse_repo_spec

    nowhere = f"{one_line(text)}: no local file or directory of that name exists"
    ref = parse_repo_spec(text, bare_allowed=True)
    if ref is None:
        raise HcError(f"{nowhere}; expected a checkpoint directory, an index .json, a .safetensors file, "
                      "a .gguf file (or the first of a split set), or a hub repository hf://org/name")
    try:
        hub = open_hub(ref)
        return Opened(hub, "hub", INDEX_NAME, hub.label)
    except HcError as exc:
        raise HcError(f"{nowhere}, and as a hub repository: {exc.message}", exc.exit_code) from None


def read_index_bytes(store: Store, name: str, required: bool) -> bytes | None:
    raw = store.read_small(name, INDEX_CAP, "a model.safetensors.index.json")
    if raw is None and required:
        raise SourceError(f"{one_line(store.display(name))}: no such file; expected a model.safetensors.index.json",
                          "not_found")
    if required and raw is not None and _is_model_config(raw):
        shown = one_line(store.display(name))
        raise HcError(f"{shown}: is a model config, not a checkpoint; expected a checkpoint directory or its "
                      f"model.safetensors.index.json (count a config's parameters with hc count-params {shown}; "
                      "give it to inspect as --config, to diff as --config-a/--config-b)")
    return raw


# Keys of a model config that no safetensors index has at its top level.
_CONFIG_KEYS = frozenset({*HUB_KEYS, *HUB_KEYS.values(), "model_type", "architectures", "text_config", "hc_mult"})


def _is_model_config(raw: bytes) -> bool:
    """A JSON object without a weight_map and with a config's keys (a config.json named as the
    checkpoint); cheap for an index, which names weight_map before its 100k names end."""
    if b'"weight_map"' in raw or len(raw) > MAX_CONFIG_BYTES:
        return False
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and not _CONFIG_KEYS.isdisjoint(doc)
