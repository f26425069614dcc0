"""The cyclic garbage collector kept off what the session holds to its end.

What exists at the end of collection (the items: 200,000 at 4096 nodes, a dozen objects each)
lives until the session ends, and so do the reports, outcomes and facts of every test run;
the collector's full passes would walk all of it again and again (50 s of a 4096-node run).
So it is frozen (`gc.freeze`) at the end of collection and every FREEZE_EVERY tests after.
"""

from __future__ import annotations

import gc

#: items between two freezes of what the session holds
FREEZE_EVERY = 2000


def freeze_what_lives() -> None:
    """What exists now stays out of the collector's passes (the end of collection)."""
    gc.freeze()


class Freezer:
    """A plugin: every FREEZE_EVERY items, collect what the last ones left in cycles, then
    freeze what is alive."""

    def __init__(self) -> None:
        self.finished = 0

    def pytest_runtest_logfinish(self) -> None:
        self.finished += 1
        if self.finished % FREEZE_EVERY == 0:
            gc.collect()
            gc.freeze()
