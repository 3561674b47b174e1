"""`hc check-port`: does a port compute the HC site right? Its outputs against golden site vectors."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.cli.app import app
from hccli.cli.options import JsonOpt, choices_callback, input_file

# the shipped variants --accept takes (hccli/port/mistakes.py SHIPPED, checked by the tests): named
# here so that the command's module imports no numpy at hc's start
ACCEPTABLE = {"bf16-write-back": "transformers' DeepseekV4DecoderLayer"}
accept_callback = choices_callback({k: k for k in ACCEPTABLE}, ", ".join(ACCEPTABLE))

EPILOG = """Examples:

\b
  # the inputs and every step
  hc run-site /tmp/tiny --save golden.safetensors

\b
  # a port's outputs, same names
  hc check-port port.safetensors --golden golden.safetensors

\b
  hc check-port port.safetensors --golden golden.safetensors --json

  hc check-port tf.safetensors --golden golden.safetensors --accept bf16-write-back   # transformers' own

Exit status: 0 the port matches within float32 rounding (given the accepted variants), 1 it departs,
2 bad input.
"""


@app.command("check-port", epilog=EPILOG)
def check_port_cmd(
    port: Annotated[Path, typer.Argument(callback=input_file("PORT"), show_default=False,
                                         help="A .safetensors file of the port's outputs for GOLDEN's inputs "
                                              "(LAYER.SITE.STEP, any subset of the steps).")],
    golden: Annotated[Path, typer.Option("--golden", callback=input_file("--golden"), show_default=False,
                                         help="Golden site vectors written by `hc run-site --save`.")],
    accept: Annotated[Optional[list[str]], typer.Option(
        "--accept", callback=accept_callback, show_default=False,
        help="A variant a library ships on purpose, taken as the reference so that the rest of the port is "
             "judged: " + ", ".join(f"{k} ({who})" for k, who in ACCEPTABLE.items()) + ".")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Compare a port's HC site outputs with golden vectors step by step; name the first step that
    departs and the known mistake (or pair of mistakes) that explains it."""
    from hccli.cli.render import port as render_port
    from hccli.cli.output import emit
    from hccli.port.check import check_port
    from hccli.runsite.golden import read_golden, read_port

    g = read_golden(golden)
    steps, ignored = read_port(port, g)
    report = check_port(g, steps, str(port), ignored, tuple(accept or ()))
    emit(report, json_out, lambda: render_port.renderables(report), command="check-port")
    if report.exit_code:
        raise typer.Exit(report.exit_code)
