"""Repository-wide pytest hooks: the two passes of scripts/run_tests.sh.

``RPENT_TEST_PASS=parallel`` leaves out the tests marked ``serial`` (they bound a rate, a
latency or a count per period, which a second worker's load would break, or load every
core themselves); ``RPENT_TEST_PASS=serial`` runs only those. Unset: every test, as before.
"""
from __future__ import annotations

import os


def pytest_collection_modifyitems(config, items):
    which = os.environ.get("RPENT_TEST_PASS", "")
    if which not in ("parallel", "serial"):
        return
    keep, drop = [], []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (keep if serial == (which == "serial") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
