"""Whole-model totals under each counting convention, from the tensor inventory.

A separate module from counting/sites.py because only `count-params --model` (and
callers that want the same figures) need it: the plain command never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hccli.model.inventory_types import COMPONENTS, Inventory, TensorSpec
from hccli.base.jsonable import OMIT_IF_NONE


@dataclass(frozen=True, slots=True)
class DtypeTotals:
    """Tensors, elements and bytes of one dtype."""

    tensors: int
    elements: int  # as stored (a packed tensor's stored elements; its logical parameters are counted apart)
    bytes: int


@dataclass(frozen=True, slots=True)
class ComponentTotals:
    """One component's totals under each counting convention."""

    tensors: int
    stored_elements: int
    stored_bytes: int
    logical_params: int
    dtypes: dict[str, DtypeTotals]


@dataclass(frozen=True, slots=True)
class ModelTotals:
    """The whole model under each counting convention; field names are the JSON keys
    (docs/commands/count-params.md)."""

    tensors: int
    stored_bytes: int
    stored_elements: int
    stored_elements_without_scales: int
    scale_elements: int  # F8_E8M0 quantisation scales
    logical_params: int  # fp4 bytes count twice, scales not at all
    text_path_params: int  # logical, no vision, no stages
    text_path_backbone_params: int  # text path without Engram
    text_path_engram_params: int
    text_path_hc_params: int
    vision_params: int
    stage_params: int
    exact: bool
    dtypes: dict[str, DtypeTotals]
    components: dict[str, ComponentTotals]  # in COMPONENTS order, only those present
    # transformers' model.num_parameters() for this config (V4 family: transformers has no
    # V4.1 model), and the logical parameters it leaves out, by reason
    transformers_params: int | None = field(default=None, metadata=OMIT_IF_NONE)
    transformers_params_left_out: dict[str, int] | None = field(default=None, metadata=OMIT_IF_NONE)


class _Tally:
    def __init__(self):
        self.tensors = self.elements = self.bytes = self.logical = 0
        self.dtypes: dict[str, list[int]] = {}

    def add(self, t: TensorSpec, el: int, nb: int, lp: int) -> None:
        self.tensors += 1
        self.elements += el
        self.bytes += nb
        self.logical += lp
        d = self.dtypes.setdefault(t.dtype, [0, 0, 0])
        d[0] += 1
        d[1] += el
        d[2] += nb

    def dtype_totals(self) -> dict[str, DtypeTotals]:
        return {k: DtypeTotals(*v) for k, v in self.dtypes.items()}


def model_totals(inv: Inventory, family: str = "") -> ModelTotals:
    comp = {c: _Tally() for c in COMPONENTS}
    everything = _Tally()
    text = engram = hc = vision = stage = scales = 0
    for t in inv.tensors:
        el, nb, lp = t.elements, t.nbytes, t.logical_params
        comp[t.component].add(t, el, nb, lp)
        everything.add(t, el, nb, lp)
        if t.is_scale:
            scales += el
        if t.scope == "text":
            text += lp
            if t.component == "engram":
                engram += lp
            if t.component == "hyper_connections":
                hc += lp
        elif t.scope == "vision":
            vision += lp
        else:
            stage += lp
    tf = None
    if family == "v4":
        from hccli.model.config.hf import transformers_params

        tf = transformers_params(inv.tensors)
    return ModelTotals(
        tensors=everything.tensors,
        stored_bytes=everything.bytes,
        stored_elements=everything.elements,
        stored_elements_without_scales=everything.elements - scales,
        scale_elements=scales,
        logical_params=everything.logical,
        text_path_params=text,
        text_path_backbone_params=text - engram,
        text_path_engram_params=engram,
        text_path_hc_params=hc,
        vision_params=vision,
        stage_params=stage,
        exact=inv.exact,
        dtypes=everything.dtype_totals(),
        components={name: ComponentTotals(c.tensors, c.elements, c.bytes, c.logical, c.dtype_totals())
                    for name, c in comp.items() if c.tensors},
        transformers_params=tf.params if tf else None,
        transformers_params_left_out=dict(tf.left_out) if tf else None,
    )

