"""Where a check ran, as properties of its item: its node, or its pair (ordered, `a->b`, or
C2's unordered `a<->b`), and whether it is a site's own check.  The plugin's collection writes
them on every check (core/collection.py); the reports read them (report/summary.py) through
:class:`PairLabel`, so that no report reads a node out of a test id.  And the `-k` spelling of
pair ids.

Dependency-free, like core/testids.py: every layer may use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the property naming a node check's node
NODE = "node"
#: the property naming a pair check's pair (`PairLabel`'s text)
PAIR = "pair"
#: the property marking a site's own check (--site-checks: cluster_host, testinfra)
SITE_CHECK = "site_check"


@dataclass(frozen=True)
class PairLabel:
    """A pair check's two nodes: from `a` to `b` (`a->b`), or either way (`a<->b`, C2's)."""

    a: str
    b: str
    ordered: bool = True

    @property
    def nodes(self) -> tuple[str, str]:
        return self.a, self.b

    def __str__(self) -> str:
        return f"{self.a}{'->' if self.ordered else '<->'}{self.b}"

    @classmethod
    def read(cls, text: object) -> PairLabel:
        """The label of a `pair` property's text (`str(label)`)."""
        a, unordered, b = str(text).partition("<->")
        if unordered:
            return cls(a, b, ordered=False)
        a, _, b = str(text).partition("->")
        return cls(a, b)


def keyword_form(text: str) -> str:
    """What `-k` can match for a pair id: pytest's -k grammar has no '>' or '<', so the
    plugin rewrites `a->b` and `a<->b` in the -k expression to `a_to_b`, and gives every
    pair test the keyword `name[a_to_b]`."""
    return re.sub(r"<?->", "_to_", text)
