"""`hc count-params` for people: rich renderables (printed by output.show) from the
report's typed rows, whose fields are the JSON document. The titles and sentences
of the tables live here; a selection line's sentence is the line's own (--json
carries it too)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from rich.text import Text  # rich.console loads it anyway

from hccli.counting.sites import HC_TITLES
from hccli.base.words import noun_for, plural, short, size
from hccli.cli.output import markup, safe
from hccli.counting.report import CountReport

if TYPE_CHECKING:
    from rich.table import Table

SITE_TITLES = {"attn": "attention site", "ffn": "FFN site", "head": "head mix"}
COMPONENT_TITLES = {
    "attention": "Attention",
    "indexer": "Indexer",
    "compressor": "KV compressor",
    "router": "Router",
    "routed_experts": "Routed experts",
    "shared_expert": "Shared expert",
    "norms": "Norms",
    "embeddings_head": "Embeddings / head",
    "engram": "Engram",
    "hyper_connections": "Hyper-connections",
    "vision": "Vision",
    "dspark": "DSpark / MTP stages",
}


# Column kinds. Numbers and names are data: never wrapped, and never cut to "…"
# (rich shrinks wrappable columns first; only if data alone is wider than the
# console would it fold a cell onto a second line, still whole). Prose wraps.
TEXT = {"overflow": "fold"}
DATA = {"no_wrap": True, "overflow": "fold"}
NUMBER = {"no_wrap": True, "overflow": "fold", "justify": "right"}


def _table(title: str, *columns: tuple[str, dict[str, Any]]) -> Table:
    from rich.table import Table  # here: --json starts without rich's tables

    t = Table(title=markup(title, "table.title"), title_justify="left", show_edge=False)
    for name, kind in columns:
        t.add_column(markup(name), **kind)
    return t


def _add(t: Table, *cells: str) -> None:
    t.add_row(*map(markup, cells))


def _n(x: int) -> str:
    return f"{x:,}"


_gb = size  # (a tiny model's bytes read "974 KB", not "0.00 GB")


def _header(r: CountReport) -> Iterator[Any]:
    c = r.config
    stage_word = "DSpark" if c.stage_kind == "dspark" else "MTP"
    yield markup(
        f"[bold]{safe(c.path)}[/] ({c.style} style, family {c.family}): "
        f"{plural(c.n_layers, 'layer')} + {c.n_stages} {stage_word} {noun_for(c.n_stages, 'stage')}, "
        f"dim {c.dim:,}, hc_mult {c.hc_mult}, {c.hc_sinkhorn_iters} Sinkhorn iterations, eps {c.hc_eps:g}, "
        f"{'head mix' if c.head_mix else 'no head mix'}"
    )
    for note in c.notes:
        yield markup(f"[yellow]note:[/] {safe(note)}")


def _selection(r: CountReport) -> Iterator[Any]:
    sel = r.selection
    yield markup(f"\n[bold]Selection[/]: {safe(sel.description)}")
    for line in sel.lines:
        yield Text("  " + line.text)
    if len(sel.lines) > 1:
        unit = "site" if sel.instances == 1 else "sites"
        if sel.per_instance is not None:
            yield markup(
                f"  [bold]Total: {_n(sel.per_instance)} x {sel.instances} {unit} = {_n(sel.total)}[/]")
        else:
            yield markup(f"  [bold]Total: {sel.instances} {unit}, {_n(sel.total)}[/]")


def _per_site(r: CountReport) -> Iterator[Any]:
    per = dict(r.per_site)
    if "attn" in per and per.get("ffn") == per["attn"]:  # the usual case: show one table for both
        per = {"attn+ffn": per["attn"], **{k: v for k, v in per.items() if k not in ("attn", "ffn")}}
    for site, info in per.items():
        if site == "head":  # one for the model, after its last layer (and one in each stage that has a head)
            title = "The head mix (after the last layer)"
        else:
            title = ("One attention or FFN site" if site == "attn+ffn" else f"One {SITE_TITLES[site]}") + " (per layer)"
        t = _table(title, ("component", TEXT), ("calculation", DATA), ("parameters", NUMBER))
        for comp, n in info.params.items():
            _add(t, f"{HC_TITLES[comp]} ({comp})", info.detail[comp], _n(n))
        _add(t, "[bold]site total[/]", "", f"[bold]{_n(info.total)}[/]")
        yield Text("")
        yield t


def _groups(r: CountReport) -> Iterator[Any]:
    t = _table("Layer groups", ("group", DATA), ("layers", NUMBER), ("what", TEXT), ("HC parameters", NUMBER))
    for g in r.groups:
        _add(t, g.label, str(g.layers), g.description, _n(g.hc_params))
    yield Text("")
    yield t
    tp, st = r.text_path, r.stages
    head = f" (head mix {_n(tp.head_mix_params)})" if tp.head_mix_params else ""
    yield markup(f"\n[bold]Text path HC parameters[/]: {_n(tp.hc_params)} in {plural(tp.sites, 'site')}{head}")
    if st.count:
        word = "DSpark" if st.kind == "dspark" else "MTP"
        yield Text(f"{word} stages, reported beside: {_n(st.hc_params)} in {plural(st.sites, 'site')} "
                   f"(add --stages to select them)")


def _layers(r: CountReport) -> Iterator[Any]:
    t = _table("Per layer", ("layer", DATA), ("roles", TEXT), ("ratio", NUMBER), ("group", DATA),
               *((col, NUMBER) for col in ("attn", "ffn", "head", "total")))
    for row in r.layers or ():
        _add(t, row.name, ", ".join(row.roles), str(row.compress_ratio), row.group,
                  _n(row.attn), _n(row.ffn), _n(row.head) if row.head else "-", _n(row.total))
    yield Text("")
    yield t


CONVENTIONS = (
    ("stored_bytes", "stored bytes", "bytes of tensor data in the shards (file size minus headers)"),
    ("stored_elements", "stored elements", "header element counts: an I8 of packed fp4 is 1, scales included"),
    ("stored_elements_without_scales", "stored elements, no scales", "the same without F8_E8M0 scales"),
    ("logical_params", "logical parameters", "fp4 bytes count 2, scales 0: everything incl. vision and stages"),
    ("text_path_params", "text path parameters", "logical, without vision and DSpark/MTP stages"),
    ("text_path_backbone_params", "text path without Engram", "the transformer backbone alone"),
    ("text_path_engram_params", "Engram tables and projections", "inside the text path"),
    ("vision_params", "vision", "vision.*, aligner.*, image_* tensors"),
    ("stage_params", "DSpark/MTP stages", "mtp.* tensors"),
    ("text_path_hc_params", "hyper-connections (text path)", "hc_* tensors outside the stages"),
)


def _model(r: CountReport) -> Iterator[Any]:
    tot = r.model
    assert tot is not None
    t = _table("Whole model, by component", ("component", TEXT),
               *((col, NUMBER) for col in ("tensors", "stored elements", "stored bytes", "logical parameters")))
    for name, c in tot.components.items():
        _add(t, COMPONENT_TITLES[name], _n(c.tensors), _n(c.stored_elements), _gb(c.stored_bytes),
                  _n(c.logical_params))
    _add(t, "[bold]all[/]", f"[bold]{_n(tot.tensors)}[/]", f"[bold]{_n(tot.stored_elements)}[/]",
              f"[bold]{_gb(tot.stored_bytes)}[/]", f"[bold]{_n(tot.logical_params)}[/]")
    yield Text("")
    yield t
    d = _table("Bytes per dtype", ("dtype", DATA), *((col, NUMBER) for col in ("tensors", "elements", "bytes")))
    for k, v in sorted(tot.dtypes.items(), key=lambda kv: -kv[1].bytes):
        _add(d, k, _n(v.tensors), _n(v.elements), f"{_n(v.bytes)} ({_gb(v.bytes)})")
    yield Text("")
    yield d
    cv = _table("Totals under each counting convention (JSON keys: see docs/commands/count-params.md)",
                ("convention", TEXT), ("value", NUMBER), ("", NUMBER), ("JSON key", DATA))
    for key, title, _what in CONVENTIONS:
        value = getattr(tot, key)
        _add(cv, title, _n(value), size(value) if key == "stored_bytes" else short(value), key)
    if tot.transformers_params is not None:
        _add(cv, "transformers' num_parameters()", _n(tot.transformers_params),
                   short(tot.transformers_params), "transformers_params")
    # a JSON key is copied into scripts: kept whole (output.fitted's floor); the table splits instead
    cv.columns[-1].min_width = max(len(k) for k in (*(c[0] for c in CONVENTIONS), "transformers_params"))
    yield Text("")
    yield cv
    if tot.transformers_params_left_out:
        left = "; ".join(f"{why} {_n(n)}" for why, n in tot.transformers_params_left_out.items())
        yield Text(f"transformers' count leaves out: {left}")
    if not tot.exact:
        yield markup(
            "[yellow]best effort:[/] only the hyper-connection tensors of this family are exact; "
            "the rest of the inventory follows public header readings and may differ from a release."
        )


def renderables(r: CountReport) -> Iterator[Any]:
    yield from _header(r)
    if r.selection.filtered:
        yield from _selection(r)
    else:
        yield from _per_site(r)
        yield from _groups(r)
    if r.layers is not None:
        yield from _layers(r)
    if r.model is not None:
        yield from _model(r)
