"""What mlx-lm, compressed-tensors and transformers keep of the release, tensor by tensor.

There is one inventory (model/inventory.py, the release's tensors); each producer's checkpoint is that
inventory under the producer's rules (docs/DIALECTS.md), read here module by module: a stored
tensor is a module's weight (packed or not), one of its quantisation side tensors, or a plain
array, and belongs to one release tensor (the routed experts of a layer to one stacked entry).

- mlx-lm (deepseek_v41 `Model.sanitize`): leaves out the DSpark/MTP stages, the vision tower,
  Engram and `ffn.gate.bias_vl`; stacks the routed experts, splits `wo_a` into its groups; an
  fp8/fp4 weight keeps its bytes as U32 words with U8 `.scales` (mxfp8/mxfp4), and
  `quantize_model` packs others (affine: `.scales` and `.biases`).
- compressed-tensors: a transformers save (reconcile.py's rules: no stages, no scales, weights
  dequantised), whose quantised modules hold what their compressor writes (names/ct.py).
- transformers itself: what it leaves out, said as such (no stages; buffers a save may omit).

What a producer leaves out by design is `dropped_by_producer` (info), anything else missing an
error as for every layout; a packed weight is checked against its side tensors, the config's
quantisation block and the width the config implies (model/packing.py).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from hccli.base.words import noun_for, plural
from hccli.model.config import quant as Q
from hccli.names import ct as dialect_ct, mlx as dialect_mlx
from hccli.names import dialects as D
from hccli.model.components import component_of
from hccli.model.packing import ct_packing, fp4_unpacked, logical_elements, mlx_packing
from dataclasses import dataclass
from hccli.base.vocab import parse_hc_name

PRODUCER = {D.MLX_LM: "mlx-lm", D.COMPRESSED_TENSORS: "compressed-tensors", D.TRANSFORMERS_SAVED: "transformers"}
_BUFFER = ".ffn.gate.tid2eid"
SIDE_ROLES = ("scales", "biases", "global_scale", "weight_shape", "zero_point", "activation")
_EXPERT = re.compile(r"^(layers\.(?:0|[1-9][0-9]{0,5})\.ffn\.experts)\.(?:0|[1-9][0-9]{0,5})\.(w[123]\.weight)$")
# (what is left out, the producer's source that leaves it out)
_DROPS = {
    "stages": ("the DSpark/MTP stages", {
        D.MLX_LM: "deepseek_v41 Model.sanitize drops mtp.",
        "transformers": "DeepseekV4PreTrainedModel._keys_to_ignore_on_load_unexpected: mtp."}),
    "vision": ("the vision tower", {
        D.MLX_LM: "Model.sanitize drops vision., aligner., image_",
        "transformers": "DeepseekV4ForCausalLM has none"}),
    "engram": ("Engram", {D.MLX_LM: "deepseek_v41 has no Engram; sanitize drops .engram.",
                          "transformers": "DeepseekV4ForCausalLM has no Engram"}),
    "bias_vl": ("the image-token router bias ffn.gate.bias_vl", {
        D.MLX_LM: "Model.sanitize: it routes image tokens, which the text model never sees",
        "transformers": "DeepseekV4TopKRouter has none"}),
}


class Part(NamedTuple):
    stored: str
    role: str  # "weight", "packed" (compressed-tensors' weight_packed), "tensor", or a SIDE_ROLES one
    module: str  # the stored module path (the key of mlx-lm's per-module quantization entries)
    info: Any  # the header entry
    shard: Any


class Want(NamedTuple):
    name: str  # canonical
    shape: tuple[int, ...]  # logical: unpacked, stacked or grouped as the producer stores it
    dtype: str | None  # None: the producer's own business
    exact: bool


@dataclass(frozen=True, slots=True)
class ComponentRow:
    component: str
    tensors: int
    stored_bytes: int
    logical_params: int  # through the packing: a packed weight counts its values, side tensors 0


@dataclass(frozen=True, slots=True)
class ComponentTable:
    """Every tensor of a producer's checkpoint by component (`inspect`)."""

    rows: list[ComponentRow]
    mapped: int
    unmapped: list[str]  # stored names no component takes (the first few)
    logical_params: int


def split(name: str, dialect: str) -> tuple[str, str, str] | None:
    """(canonical release name of its module's tensor, role, stored module path), or None."""
    if dialect == D.MLX_LM:
        return dialect_mlx.split(name)
    side = dialect_ct.split(name)
    if side is not None:
        weight, role, suffix = side
        base = D.canonical_name(weight, D.TRANSFORMERS_SAVED)
        return (base, "packed" if suffix == "weight_packed" else role, weight[:-7]) if base else None
    base = D.canonical_name(name, D.TRANSFORMERS_SAVED)
    return (base, "weight" if name.endswith(".weight") else "tensor", name) if base else None


def gather(tensors: dict, dialect: str) -> tuple[dict[str, dict[str, Part]], list[str]]:
    """canonical name -> {role: Part}, and the stored names the producer never writes."""
    out: dict[str, dict[str, Part]] = {}
    unmapped: list[str] = []
    for name, (shard, info) in tensors.items():
        got = split(name, dialect)
        if got is None:
            unmapped.append(name)
            continue
        base, role, module = got
        out.setdefault(base, {})[role] = Part(name, role, module, info, shard)
    return out, unmapped


def _drop(t: Any) -> str | None:
    if t.scope == "stage":
        return "stages"
    if t.scope == "vision":
        return "vision"
    if t.component == "engram":
        return "engram"
    return "bias_vl" if t.name.endswith(".ffn.gate.bias_vl") else None


def left_out(inventory: Any) -> dict[str, int]:
    """Kind of what every producer here leaves out by design -> the release tensors of that kind."""
    drops: dict[str, int] = {}
    for t in inventory.tensors:
        kind = _drop(t)
        if kind is not None:
            drops[kind] = drops.get(kind, 0) + 1
    return drops


def expected(inventory: Any, dialect: str, model_dtype: str | None) -> dict[str, Want]:
    """Canonical name -> what the producer stores there."""
    if dialect != D.MLX_LM:
        from hccli.checkpoint.verify.reconcile import expected_layout

        layout = expected_layout(inventory, D.TRANSFORMERS_SAVED, model_dtype)
        return {n: Want(n, e.shape, e.dtype, e.exact) for n, e in layout.items()}
    out: dict[str, Want] = {}
    stacked: dict[str, list] = {}
    groups = inventory.config.o_groups
    for t in inventory.tensors:
        if t.is_scale or _drop(t) is not None:
            continue
        shape = fp4_unpacked(t.shape) if t.fp4_packed else t.shape
        m = _EXPERT.match(t.name)
        if m is not None:
            stacked.setdefault(f"{m[1]}.{D.FUSED_MARK}.{m[2]}", []).append((shape, t.exact))
        elif t.name.endswith(dialect_mlx.GROUPED + ".weight") and shape[0] % groups == 0:
            out[t.name] = Want(t.name, (groups, shape[0] // groups, shape[1]), None, t.exact)
        else:
            out[t.name] = Want(t.name, shape, None, t.exact)
    for name, items in stacked.items():
        out[name] = Want(name, (len(items), *items[0][0]), None, all(e for _, e in items))
    return out


def _sig(p: Part | None) -> tuple[str, tuple[int, ...]] | None:
    return None if p is None else (p.info.dtype, tuple(p.info.shape))


def module_entries(quant: Any) -> dict[str, Any]:
    """mlx-lm's per-module entries of the config's block, looked up once a module."""
    return dict(quant.per_path) if quant is not None else {}


def packed_width(dialect: str, parts: dict[str, Part], quant: Any, in_dims: int | None, entries: dict[str, Any]
                 ) -> tuple[int | None, str | None]:
    """(values a row of the module's weight holds, problem) for a quantised module, or (None, None)
    for one stored as it is. entries: module_entries(quant)."""
    weight = parts.get("packed") or parts.get("weight")
    scales = parts.get("scales")
    if weight is None:
        return None, None
    if dialect == D.MLX_LM:
        if scales is None:
            return (None, "has .biases and no .scales") if "biases" in parts else (None, None)
        if quant is None or quant.kind not in (Q.MLX, Q.RELEASE_FP8):
            return None, "has .scales, and config.json holds no `quantization` block: mlx-lm's load_model " \
                         "would not read it as quantised"
        named = entries.get(weight.module)
        width, _, problem = mlx_packing(_sig(weight), _sig(scales), _sig(parts.get("biases")), in_dims,
                                        named or quant.default, named is not None)
        return width, problem
    if "packed" not in parts and scales is None:
        return None, None
    if quant is None or quant.kind != Q.COMPRESSED_TENSORS:
        return None, "is quantised, and config.json holds no compressed-tensors quantization_config"
    if "packed" in parts and weight.info.dtype == "I32" and "weight_shape" not in parts:
        return None, "lacks its weight_shape (PackedQuantizationCompressor writes one beside weight_packed)"
    return ct_packing(_sig(weight), "packed" in parts, _sig(scales), in_dims, quant.groups)


def _counted(ckpt: Any, dialect: str):
    """(canonical name, Part, logical parameters) of every stored tensor the producer writes, and
    the stored names it never writes: a packed weight counts the values it holds, side tensors 0.
    Widths from the config's inventory where there is a config, else from the shapes and the
    config's quantisation block alone."""
    parts, unmapped = gather(ckpt.tensors(), dialect)
    widths = _widths(ckpt, dialect)
    quant = ckpt.config.quantisation if ckpt.config is not None else None
    entries = module_entries(quant)
    out = []
    for base, group in parts.items():
        width, _ = packed_width(dialect, group, quant, widths.get(base), entries)
        for p in group.values():
            n = 0 if p.role in SIDE_ROLES else \
                logical_elements(tuple(p.info.shape), width) if width is not None else p.info.n_elements
            out.append((base, p, n))
    return out, unmapped


def component_table(ckpt: Any, dialect: str) -> ComponentTable:
    """Every stored tensor filed under its component (`inspect`)."""
    from hccli.model.inventory_types import COMPONENTS

    counted, unmapped = _counted(ckpt, dialect)
    acc: dict[str, list[int]] = {}
    for base, p, n in counted:
        row = acc.setdefault(component_of(base), [0, 0, 0])
        row[0] += 1
        row[1] += p.info.nbytes
        row[2] += n
    order = {c: i for i, c in enumerate((*COMPONENTS, "other"))}
    rows = [ComponentRow(c, *v) for c, v in sorted(acc.items(), key=lambda kv: order[kv[0]])]
    return ComponentTable(rows, len(counted), unmapped[:8], sum(r.logical_params for r in rows))


def logical_by_name(ckpt: Any, dialect: str) -> dict[str, int]:
    """stored name -> logical parameters, as component_table counts them (`diff`'s inventory)."""
    return {p.stored: n for _, p, n in _counted(ckpt, dialect)[0]}


def _widths(ckpt: Any, dialect: str) -> dict[str, int]:
    if ckpt.config is None:
        return {}
    from hccli.model.inventory import build_inventory

    wants = expected(build_inventory(ckpt.config), dialect, None)
    return {n: w.shape[-1] for n, w in wants.items() if w.shape}


def drop_messages(inventory: Any, dialect: str, config: Any) -> list[str]:
    """One line for each kind of release tensor the producer leaves out by design."""
    producer = key = D.MLX_LM if dialect == D.MLX_LM else "transformers"  # compressed-tensors saves through it
    out = []
    for kind, n in left_out(inventory).items():
        what, why = _DROPS[kind]
        out.append(f"{producer} leaves out {what} ({why[key]}): {plural(n, 'tensor')} of the config's inventory "
                   f"{'is' if n == 1 else 'are'} not here, by design")
    if dialect == D.MLX_LM and config.vision is None and config.family == "v4.1":
        out.append("mlx-lm leaves out the vision tower, and its save_config removes vision_config: whether the "
                   "source had one is not recorded here (--config with the source's config.json lists it)")
    return out


def split_buffers(missing: list[str]) -> tuple[list[str], list[str]]:
    """(the missing names, the hash-routing tables among them): transformers holds `tid2eid` as a
    buffer (DeepseekV4HashRouter), which a save may leave out."""
    return [n for n in missing if not n.endswith(_BUFFER)], [n for n in missing if n.endswith(_BUFFER)]


def buffer_messages(buffers: list[str]) -> list[str]:
    return [f"transformers holds the hash-routing tables as buffers (DeepseekV4HashRouter.tid2eid), and this save "
            f"has none of the {len(buffers)} (first: '{buffers[0]}')"] if buffers else []


def findings(ckpt: Any, inventory: Any, dialect: str) -> list[tuple[str, str, bool]]:
    """(code, message, exact) of the inventory against a producer's checkpoint: exact False
    where the family's inventory is best effort (a mismatch there is a warning)."""
    tensors = ckpt.tensors()
    parts, unmapped = gather(tensors, dialect)
    model_dtype = _model_dtype(parts)
    wants = expected(inventory, dialect, model_dtype)
    quant = ckpt.config.quantisation if ckpt.config is not None else None
    entries = module_entries(quant)
    producer = PRODUCER[dialect]
    out: list[tuple[str, str, bool]] = [("dropped_by_producer", m, True)
                                        for m in drop_messages(inventory, dialect, inventory.config)]
    buffers: set[str] = set()
    if dialect != D.MLX_LM:
        _, left = split_buffers([n for n in wants if n not in parts])
        buffers = set(left)
        out += [("dropped_by_producer", m, True) for m in buffer_messages(left)]
    for name, want in wants.items():
        group = parts.get(name)
        weight = None if group is None else group.get("packed") or group.get("weight") or group.get("tensor")
        if weight is None:
            if name in buffers:
                continue  # a buffer the save left out, said above
            spelled = dialect_mlx.stored_name(name.replace(D.FUSED_MARK, "0")) if dialect == D.MLX_LM else None
            shown = f"'{name}'" + (f" ({producer} writes '{spelled}')" if spelled else "")
            orphans = "" if group is None else " (its " + ", ".join(f"'{p.stored}'" for p in group.values()) + \
                " are here without it)"
            out.append(("missing_tensor", f"{shown} {list(want.shape)} is implied by the config but absent{orphans}",
                        want.exact))
            continue
        width, problem = packed_width(dialect, group, quant, want.shape[-1] if want.shape else None, entries)
        ws = tuple(weight.info.shape)
        if problem is not None:
            out.append(("wrong_packing", f"'{weight.stored}' ({name}) {problem}", want.exact))
        elif width is not None and ws[:-1] != want.shape[:-1]:
            out.append(("wrong_shape", f"'{weight.stored}' has shape {list(ws)}; the config implies "
                        f"{list(want.shape[:-1])} rows of {want.shape[-1]} values", want.exact))
        elif width is None and ws != want.shape:
            out.append(("wrong_shape", f"'{weight.stored}' has shape {list(ws)}; the config implies "
                        f"{list(want.shape)}", want.exact))
        elif width is None and want.dtype and weight.info.dtype != want.dtype and parse_hc_name(name) is None:
            out.append(("wrong_dtype", f"'{weight.stored}' is {weight.info.dtype}; the config implies {want.dtype}",
                        want.exact))
    all_exact = all(w.exact for w in wants.values())
    for name in sorted(n for n in parts if n not in wants):
        first = next(iter(parts[name].values()))
        out.append(("unexpected_tensor", f"'{first.stored}' ({name}) in {first.shard.file} is not implied by the "
                    "config", all_exact))
    if unmapped:
        out.append(("unmapped_tensor", f"{plural(len(unmapped), 'tensor')} whose {noun_for(len(unmapped), 'name')} {producer} does not write for this "
                    f"model (first: '{unmapped[0]}')", True))
    return out


def _model_dtype(parts: dict[str, dict[str, Part]]) -> str | None:
    """The dtype a transformers save stores its weights in: its embedding's."""
    emb = parts.get("embed.weight", {})
    p = emb.get("weight") or emb.get("tensor")
    return p.info.dtype if p is not None and "scales" not in emb else None
