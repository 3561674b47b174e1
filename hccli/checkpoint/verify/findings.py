"""verify's findings: the codes (stable; the README lists them) with their severity and
meaning, one Finding per problem, and the cap on how many one code lists: past
MAX_FINDINGS_PER_CODE the rest are one finding that counts them, so that a hostile file
cannot make --verify build, or print, millions of them.

A finding that follows from another (a tensor missing because its shard is, every inventory
finding against a config of another model) names that root finding's id as its `cause`: people
see the root with a count and the first names of what follows from it, --json keeps every
finding with its cause. The verdict counts the findings that stand on their own (roots and
findings of no cause) by severity, and the follow-ons apart."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from hccli.base.bounded import one_line
from hccli.base.jsonable import INLINE, NOT_IN_JSON

# findings of one code listed (people see the first 20 of them); the rest are one finding, counted
MAX_FINDINGS_PER_CODE = 1000

# first names people see of each code that follows from a root cause (--json has them all)
FIRST_NAMES_SHOWN = 3

# code -> (severity, what it means); the README lists them
CODES = {
    "config_mismatch": ("error", "the config and the checkpoint are different models (family, layers, stages, "
                                 "hc_mult or dim): one finding saying both sides; the inventory findings it causes "
                                 "name it as their cause"),
    "unreadable_shard": ("error", "a shard's header could not be read"),
    "missing_shard": ("error", "the index (or the other shards' -of-N names) names a shard file that is not there"),
    "partial_file": ("error", "a .partial file beside the shards: an interrupted download or write"),
    "unsafe_shard_path": ("error", "the index names a shard outside the checkpoint (absolute path or ..)"),
    "index_missing_tensor": ("error", "the index lists a tensor that its shard does not hold"),
    "unindexed_tensor": ("error", "a shard holds a tensor the index does not list"),
    "wrong_shard": ("error", "a tensor lies in another shard than the index says"),
    "duplicate_tensor": ("error", "a tensor is stored in several shards"),
    "duplicate_spelling": ("error", "two names spell one tensor (a leading zero, a digit of another script, "
                                    "an alias of the dialect): a loader may take either"),
    "unindexed_shard": ("warning", "a .safetensors file in the directory that the index never names"),
    "total_size_mismatch": ("error", "metadata.total_size differs from the sum of the tensors' byte spans"),
    "no_index": ("warning", "a directory of shards without model.safetensors.index.json"),
    "hc_incomplete": ("error", "a site lacks one of its hc_*_fn, hc_*_base, hc_*_scale"),
    "hc_shape": ("error", "HC tensors whose shapes disagree with each other or with hc_mult"),
    "hc_dtype": ("error", "an HC tensor that is not F32"),
    "hc_quantised": ("error", "an HC tensor stored quantised (a GGML type: Q8_0, Q4_K, ...; an integer type from "
                              "mlx-lm or compressed-tensors), named"),
    "hc_reduced_precision": ("warning", "an HC tensor of a GGUF, mlx-lm or compressed-tensors checkpoint stored in "
                                        "F16 or BF16: each value rounded to 2^-11 or 2^-8 relative"),
    "hc_missing_site": ("error", "a GGUF lacks an HC site its metadata's block_count implies"),
    "gguf_misaligned": ("error", "a GGUF tensor's data offset is not a multiple of general.alignment (llama.cpp "
                                 "refuses the file)"),
    "gguf_overlap": ("error", "two GGUF tensors share bytes of the data section (llama.cpp refuses the file)"),
    "hc_nonfinite": ("error", "an HC tensor holds NaN or Inf"),
    "hc_unchecked": ("warning", "an hc_*_fn whose values were not read: past the bytes verify reads in one run"),
    "config_unreadable": ("warning", "config.json beside the checkpoint could not be used"),
    "missing_tensor": ("error", "the config implies a tensor the checkpoint lacks"),
    "unexpected_tensor": ("error", "the checkpoint holds a tensor the config does not imply"),
    "wrong_shape": ("error", "a tensor's shape differs from what the config implies"),
    "wrong_dtype": ("error", "a tensor's dtype differs from what the config implies"),
    "partial_inventory": ("warning", "a GGUF holds only some of the tensors the config implies (said once)"),
    "unmapped_tensor": ("warning", "a tensor name the checkpoint's dialect does not define"),
    "wrong_packing": ("error", "a quantised weight whose packed shape or side tensors (scales, biases, weight_shape) "
                               "disagree with its producer's rules, config.json's quantisation block or the config"),
    "dropped_by_producer": ("info", "tensors the config implies that the checkpoint's producer leaves out by design "
                                    "(mlx-lm, transformers: stages, vision, Engram, ...), counted per kind"),
    "shard_placement": ("info", "a known release's tensors lie in other shards, or its shards differ in size, "
                                "from the published files"),
}


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: str
    message: str
    more: int = field(default=0, compare=False, metadata=NOT_IN_JSON)  # >0: stands for that many unlisted
    id: str | None = None  # a root cause's: the findings that follow from it name it as their cause
    cause: str | None = None  # the id of the root finding this one follows from
    subject: str | None = field(default=None, compare=False, metadata=NOT_IN_JSON)  # the tensor it is about


@dataclass(frozen=True, slots=True)
class SidedFinding:
    """A finding of one of two checkpoints (hc diff's A or B): its keys, then which side."""

    finding: Finding = field(metadata=INLINE)
    side: str  # "a" | "b"


def sided(findings, side: str) -> tuple[SidedFinding, ...]:
    return tuple(SidedFinding(f, side) for f in findings)


def finding(code: str, message: str, *, cause: str | None = None, subject: str | None = None,
            root_id: str | None = None) -> Finding:
    """root_id: this finding is a root cause, named so by the findings that follow from it."""
    return Finding(code, CODES[code][0], one_line(message, 400), id=root_id, cause=cause, subject=subject)


def more(code: str, n: int, severity: str | None = None, cause: str | None = None) -> Finding:
    return Finding(code, severity or CODES[code][0], f"... and {n:,} more {code} findings, not listed (a code lists "
                   f"its first {MAX_FINDINGS_PER_CODE:,})", n, cause=cause)


def each(findings: list[Finding], code: str, items: list, make_message, cause=None) -> None:
    """A finding per item, at most MAX_FINDINGS_PER_CODE, then one that counts the rest (one per
    cause where `cause`, a function of the item, says what each follows from)."""
    why = cause or (lambda item: None)
    findings.extend(finding(code, make_message(item), cause=why(item), subject=item if isinstance(item, str) else None)
                    for item in items[:MAX_FINDINGS_PER_CODE])
    rest = items[MAX_FINDINGS_PER_CODE:]
    if rest:
        counts = Counter(map(cause, rest)) if cause else {None: len(rest)}
        findings.extend(more(code, n, cause=c) for c, n in counts.items())


def caused(f: Finding, cause: str) -> Finding:
    return replace(f, cause=cause)


def capped(findings: list[Finding]) -> list[Finding]:
    """The first MAX_FINDINGS_PER_CODE findings of each code, in order, and after the last of them
    one per cause that counts the rest (with the worst severity among them)."""
    kept: dict[str, int] = {}
    rest: dict[tuple, list] = {}  # (code, cause) -> [count, severity]
    out: list[Finding] = []
    for f in findings:
        n = kept.get(f.code, 0)
        if f.more or n == MAX_FINDINGS_PER_CODE:
            r = rest.setdefault((f.code, f.cause), [0, f.severity])
            r[0] += f.more or 1
            r[1] = "error" if f.severity == "error" else r[1]
            continue
        kept[f.code] = n + 1
        out.append(f)
    if rest:
        last = {f.code: i + 1 for i, f in enumerate(out)}
        # from the back, so that each insertion leaves the places of the others as they are
        for (code, cause), (n, severity) in sorted(rest.items(), key=lambda kv: -last.get(kv[0][0], len(out))):
            out.insert(last.get(code, len(out)), more(code, n, severity, cause))
    return out


@dataclass(frozen=True, slots=True)
class Verdict:
    """--verify's counts: the findings that stand on their own (root causes and findings of no
    cause) by severity; the findings that follow from a root cause apart."""

    errors: int
    warnings: int
    info: int
    root_causes: int
    follow_ons: int


def verdict(findings: list[Finding]) -> Verdict:
    by: Counter = Counter()
    follow = 0
    for f in findings:
        if f.cause is not None:
            follow += f.more or 1
        else:
            by[f.severity] += f.more or 1  # a finding that counts others stands for them
    roots = {f.cause for f in findings if f.cause is not None}
    return Verdict(by["error"], by["warning"], by["info"], len(roots), follow)


@dataclass(frozen=True, slots=True)
class FollowOns:
    """What follows from one root cause: how many findings, and per code the count and the
    first names (FIRST_NAMES_SHOWN)."""

    cause: str
    count: int
    codes: tuple[tuple[str, int, tuple[str, ...]], ...]


def follow_ons(findings: list[Finding]) -> dict[str, FollowOns]:
    """root id -> what follows from it, for each root that something follows from."""
    acc: dict[str, dict[str, list]] = {}
    for f in findings:
        if f.cause is None:
            continue
        c = acc.setdefault(f.cause, {}).setdefault(f.code, [0, []])
        c[0] += f.more or 1
        if not f.more and f.subject is not None and len(c[1]) < FIRST_NAMES_SHOWN:
            c[1].append(f.subject)
    return {cause: FollowOns(cause, sum(n for n, _ in codes.values()),
                             tuple((code, n, tuple(names)) for code, (n, names) in codes.items()))
            for cause, codes in acc.items()}
