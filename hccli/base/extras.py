"""How to install an optional extra (plot, kernel), said the one way every message says it.

In a checkout installed editable (`pip install -e .`), `pip install 'hccli[plot]'` would
fetch a released hccli over the checkout; there the hint names the checkout instead. That
is read from the install's own record (PEP 610's direct_url.json), never guessed from paths.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path


def install_hint(extra: str) -> str:
    """The pip command that adds `extra` to the hccli that is running."""
    checkout = editable_checkout()
    if checkout is None:
        return f"pip install {shlex.quote(f'hccli[{extra}]')}"
    here = "." if os.path.abspath(os.getcwd()) == str(checkout) else str(checkout)
    return f"pip install -e {shlex.quote(f'{here}[{extra}]')}"


def editable_checkout() -> Path | None:
    """The folder of an editable install of hccli that this very package comes from, else None."""
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        raw = metadata.distribution("hccli").read_text("direct_url.json")
        doc = json.loads(raw) if raw else None
    except (metadata.PackageNotFoundError, ValueError, OSError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("dir_info"), dict) or \
            doc["dir_info"].get("editable") is not True or not isinstance(doc.get("url"), str):
        return None
    url = urlparse(doc["url"])
    if url.scheme != "file":
        return None
    root = Path(os.path.abspath(unquote(url.path)))
    # another checkout's install (this one run from its own folder): its hint would change that one
    return root if (root / "hccli").resolve() == Path(__file__).resolve().parents[1] else None
