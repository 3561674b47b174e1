"""Options shared by several commands (the huggingface_hub CLI habit)."""

from __future__ import annotations

import typer
from typing import Annotated

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document for scripts instead of tables.")]
