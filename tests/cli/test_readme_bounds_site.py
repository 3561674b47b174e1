"""The bounds table's rows (docs/security.md) of run-site and check-port, read back from their constants."""

import re

from test_readme_bounds import BOUNDS_PAGE, _row

from hccli.runsite import golden as site_golden, source as site_source


def test_site_bounds_match_the_code():
    text = BOUNDS_PAGE.read_text()
    golden = "values in one golden site file (`run-site --save`/`--compare`, `check-port`)"
    for what, value in (("values in one streams array, mixes or fn `run-site` reads or builds (tokens x hc x dim, "
                         "tokens x (2+hc)hc, (2+hc)hc x hc dim)", site_source.MAX_STREAM_VALUES),
                        (golden, site_golden.MAX_GOLDEN_VALUES), (golden, site_golden.MAX_TENSOR_VALUES),
                        ("Sinkhorn iterations in a golden site file (`run-site --save`/`--compare`, `check-port`)",
                         site_golden.MAX_GOLDEN_ITERS)):
        assert re.search(r"(?<![\d,])" + re.escape(f"{value:,}") + r"(?!\d|,\d)", _row(text, what)), what
