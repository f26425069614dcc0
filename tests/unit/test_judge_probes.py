"""judge/common/probes.py: a node script's section and the reader of its answer; a reader refuses
an answer that is not the object it reads (FactsError), and its field helpers give their default
for a field of the wrong type (a node script's field may be null where it could not measure)."""

from __future__ import annotations

import pytest

from cluster_tests.judge.common import probes
from cluster_tests.judge.common.probes import FactsError, Probe


def test_a_probe_names_its_script_and_section_and_reads_its_answer() -> None:
    p = Probe("storeprobe.py", "dir", lambda raw: probes.obj(raw, "the output directory"))
    assert str(p) == "storeprobe.py:dir"
    assert p.read({"path": "/x"}) == {"path": "/x"}
    with pytest.raises(FactsError, match="the output directory"):
        p.read(["not", "an", "object"])


def test_the_helpers_read_what_json_gives_and_refuse_the_rest() -> None:
    assert probes.text("a") == "a" and probes.text(None) == ""
    assert probes.opt_text(None) is None and probes.opt_text("x") == "x"
    assert probes.integer(3) == 3 and probes.opt_int(None) is None
    assert probes.number(2) == 2.0 and probes.flag(True) is True
    assert probes.texts(["a", "b"]) == ("a", "b")
    assert probes.text_map({"k": "v"}) == {"k": "v"}
    assert (probes.text(3), probes.integer("3"), probes.flag("yes")) == ("", 0, False)
    assert probes.integer(True) == 0 and probes.opt_int(False) is None  # a bool is no number
    assert (probes.texts("ab"), probes.text_map(["k"])) == ((), {})
    assert probes.texts(["a", 3, None]) == ("a",)
    with pytest.raises(FactsError, match="facts: expected an object, got list"):
        probes.obj([], "facts")
