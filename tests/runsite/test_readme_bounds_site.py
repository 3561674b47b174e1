"""The bounds table's rows (docs/security.md) of run-site and check-port, read back from their constants."""

import re

from test_readme_bounds import BOUNDS_PAGE, _row

from hccli.runsite import golden as site_golden, source as site_source


def test_site_bounds_match_the_code():
    text = BOUNDS_PAGE.read_text()
    for what, value in (("values in one streams array or fn `run-site` reads or builds (tokens x hc x dim)",
                         site_source.MAX_STREAM_VALUES),
                        ("values in one golden site file (`run-site --save`/`--compare`, `check-port`)",
                         site_golden.MAX_GOLDEN_VALUES)):
        assert re.search(r"(?<![\d,])" + re.escape(f"{value:,}") + r"(?!\d|,\d)", _row(text, what)), what
