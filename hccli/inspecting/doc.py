"""`hc inspect --json`: the document's types, field by field in its order (jsonable.to_jsonable
turns them into JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from hccli.model.config.model import ConfigUnusable
from hccli.inspecting.hc import HcEntry
from hccli.base.errors import EXIT_FINDINGS, EXIT_OK
from hccli.base.jsonable import OMIT_IF_NONE

if TYPE_CHECKING:  # verify's modules load only for --verify; --metadata's and --stats' when asked
    from hccli.checkpoint.verify.findings import Finding, Verdict
    from hccli.checkpoint.verify.producers import ComponentTable
    from hccli.inspecting.meta import FileMetadata
    from hccli.inspecting.stats import TensorStats


@dataclass(frozen=True)
class TensorRow:
    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int  # as stored in the shard file
    shard: str
    offset: int  # of its first byte in the shard file


@dataclass(frozen=True, slots=True)
class DtypeTotal:
    tensors: int
    bytes: int


@dataclass(frozen=True, slots=True)
class UnreadableShard:
    file: str
    error: str | None


@dataclass(frozen=True, slots=True)
class LayerNumbering:
    n_layers: int
    n_stages: int
    stages: str = "numbered n_layers + s, named mtp.s"
    root_head: str = "numbered n_layers + n_stages, named head"


@dataclass(frozen=True, slots=True)
class RemoteInfo:
    repo: str
    revision: str
    sha: str
    subfolder: str | None
    endpoint: str
    requests: int
    cached_files: int
    offline: bool


@dataclass(frozen=True, slots=True)
class DialectInfo:
    name: str  # dialects.DIALECTS, or "unknown"
    description: str
    evidence: str  # the first name that decided it
    note: str


@dataclass(frozen=True, slots=True)
class GgufInfo:
    architecture: str
    settings: dict[str, Any]  # the `{architecture}.*` metadata keys, prefix removed


@dataclass(frozen=True, slots=True)
class InspectDocument:
    """`hc inspect --json`, field by field in its order."""

    path: str
    kind: str
    dialect: DialectInfo
    config: str | None
    config_note: ConfigUnusable | None  # the config.json beside it, set aside
    gguf: GgufInfo | None
    shards: int
    tensors: int
    stored_bytes: int
    logical_params: int
    dtypes: dict[str, DtypeTotal]
    components: ComponentTable | None  # mlx-lm and compressed-tensors checkpoints: every tensor's component
    layer_numbering: LayerNumbering
    hc: list[HcEntry]
    findings: list[Finding]  # (in the envelope: output.json_document)
    verify_counts: Verdict | None  # --verify's counts (findings.verdict); None without --verify
    unreadable_shards: list[UnreadableShard]
    transferred_bytes: int
    remote: RemoteInfo | None
    verified: bool
    # present when asked for (--metadata, --stats, a tensor selection); the list, ~100k rows, last
    metadata: list[FileMetadata] | None = field(default=None, metadata=OMIT_IF_NONE)
    stats_bytes_read: int | None = field(default=None, metadata=OMIT_IF_NONE)  # the stored bytes --stats read
    stats: list[TensorStats] | None = field(default=None, metadata=OMIT_IF_NONE)
    tensor_list: list[TensorRow] | None = field(default=None, metadata=OMIT_IF_NONE)

    VERDICTS: ClassVar[tuple[str, ...]] = ("ok", "warnings", "errors")  # --verify's word; none without

    @property
    def exit_code(self) -> int:
        return verify_exit_code(self.findings if self.verified else None)

    @property
    def verdict(self) -> str | None:
        """--verify's word: errors (exit 1), warnings (none of error level), ok; None without --verify."""
        if not self.verified:
            return None
        levels = {f.severity for f in self.findings}
        return "errors" if "error" in levels else "warnings" if "warning" in levels else "ok"


def verify_exit_code(findings: list[Finding] | None) -> int:
    """1 when --verify found an error-level finding (None: no --verify, 0)."""
    return EXIT_FINDINGS if any(f.severity == "error" for f in findings or ()) else EXIT_OK
