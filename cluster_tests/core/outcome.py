"""How a check ends: red with a :class:`~cluster_tests.judge.problem.Problem`, or *blocked*.

    fail(problem)                  # the red: its text, and the Problem as a JUnit property
    block(ids.LOGIN.of("node3"), "node3 refuses connections")
                                   # skipped: "blocked by test_login[node3]: node3 refuses ..."

One cause, one red: a check that fails only because a cause already reported by another check
of this run holds is skipped naming that check (the ``blocked_by`` JUnit property), so a dead
node is one red, not fifty. ``block`` blocks only when the blocking check is selected in this
run (``-k`` may have left it out): otherwise it returns and the caller fails with its own text,
so the cause is never hidden.

The :class:`Outcomes` plugin (registered by cluster_tests.plugin) gives each check the place
where its Problem and fixes go, puts them on the failed report (a red that did not fail through
``fail`` gets a Problem made from its report: where from its parameters, the text, the fixes
offered),
and extends pytest's last-failed set with the blocked checks, so that ``pytest --lf`` after the
fix reruns the root and everything it blocked.
"""

from __future__ import annotations

import contextvars
import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

import pytest

from cluster_tests.core import pytestprivate
from cluster_tests.core.testids import Scope
from cluster_tests.judge.problem import (
    BLOCKED_BY,
    PROPERTY,
    ROW_MARKS,
    OutcomeCause,
    Problem,
    report_text,
    unjudged,
)

#: the category (pytest's final line, the terminal reporter's stats) of a check that does not
#: apply here
NOT_APPLICABLE = "not applicable"
#: the test ids selected in this run (item names: "test_login[node3]")
SELECTED_KEY = pytest.StashKey[frozenset[str]]()
PROBLEM_KEY = pytest.StashKey[Problem]()

_ITEM: contextvars.ContextVar[pytest.Item | None] = contextvars.ContextVar("ct_item", default=None)


def selected(test_id: str) -> bool:
    """Whether `test_id` runs in this session (True outside a test: nothing to compare with)."""
    item = _ITEM.get()
    if item is None:
        return True
    got = item.config.stash.get(SELECTED_KEY, None)
    return got is None or test_id in got


def fail(problem: Problem) -> NoReturn:
    """Fail the calling check with `problem` (its text is the red; the value is the property)."""
    item = _ITEM.get()
    if item is not None:
        problem = dataclasses.replace(problem, check=problem.check or item.name)
        item.stash[PROBLEM_KEY] = problem
    pytest.fail(problem.text(), pytrace=False)


@pytestprivate.named_as_skip  # reported as pytest reports its own skips ("Skipped: blocked by")
class Blocked(pytestprivate.ItemSkip):
    """The skip of a blocked check: it carries the blocking red's id, so that the property is
    put on whichever check it reaches (a session-wide measurement re-raises it to each)."""

    def __init__(self, root: str, why: str) -> None:
        super().__init__(f"blocked by {root}: {why}")
        self.root = root


def block(root: str, why: str) -> None:
    """Skip the calling check as blocked by the red `root` (a test id) when `root` runs in this
    session; return (the caller then fails with its own text) when it does not."""
    item = _ITEM.get()
    if item is None or root == item.name or not selected(root):
        return
    raise Blocked(root, why)


@dataclasses.dataclass
class Tried:
    """How one ordered pair ended inside a per-node item (``node3->*``, see core.pairs): red
    (`problem`), blocked by the red `root`, skipped, or passed; with the warnings it gave."""

    pair: tuple[str, str]
    problem: Problem | None = None
    root: str = ""
    why: str = ""
    skipped: bool = False
    warned: list[warnings.WarningMessage] = dataclasses.field(default_factory=list)


def attempt(pair: tuple[str, str], check: Callable[[str, str], object]) -> Tried:
    """Run the pair check `check(a, b)` inside the current item and say how it ended, instead of
    ending the item: its red's Problem (taken back from the item), its block, its skip."""
    item = _ITEM.get()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check(*pair)
        except Blocked as exc:
            return Tried(pair, root=exc.root, why=str(exc.msg).split(": ", 1)[-1], warned=caught)
        except pytest.skip.Exception as exc:
            return Tried(pair, why=str(exc.msg), skipped=True, warned=caught)
        except pytest.fail.Exception as exc:
            problem = item.stash.get(PROBLEM_KEY, None) if item is not None else None
            if item is not None and problem is not None:
                del item.stash[PROBLEM_KEY]
            if problem is None:
                problem = unjudged(pair, report_text(str(exc.msg)))
            return Tried(pair, problem=dataclasses.replace(problem, check=""), warned=caught)
    return Tried(pair, warned=caught)


def row(tried: Sequence[Tried]) -> str:
    """The marks of `tried`, in order: the item's pairs at a glance, and the reports' matrix."""
    return "".join(ROW_MARKS["failed" if t.problem is not None else "blocked" if t.root
                             else "skipped" if t.skipped else "passed"] for t in tried)


def conclude(item_pair: tuple[str, str], tried: Sequence[Tried],
             owner: Callable[[Tried], str | None], warn: bool = True, passed: int = 0) -> None:
    """End a per-node item from its pairs: red when a pair is red here, else blocked when a pair
    is blocked, else passed (its pairs' warnings warned again).  `owner(t)`: the test id of the
    other per-node item that holds t's red (the node at fault is at that end), or None when it
    is this item's: a red held there blocks here, so that each failing pair is one red, named
    under both its nodes.  `warn`: warn the pairs' warnings again here (False: the other item
    does).  `passed`: pairs of the item that passed without a Tried (read in bulk)."""
    reds: list[Problem] = []
    blocks: list[tuple[str, str]] = []
    for t in tried:
        for w in t.warned if warn else ():
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if t.problem is not None:
            there = owner(t)
            if there is not None and selected(there):
                said = f"{t.pair[0]} -> {t.pair[1]}"
                head = t.problem.headline
                blocks.append((there, head if head.startswith(said) else f"{said}: {head}"))
            else:
                reds.append(t.problem)
        elif t.root:
            said = f"{t.pair[0]} -> {t.pair[1]}"
            blocks.append((t.root, t.why if said in t.why else f"{said}: {t.why}"))
    if len(reds) == 1:
        fail(reds[0])
    if reds:
        fail(_combined(item_pair, reds, len(tried) + passed))
    if blocks:
        roots = list(dict.fromkeys(root for root, _ in blocks))
        fine = passed + sum(1 for t in tried if t.problem is None and not t.root and not t.skipped)
        raise Blocked(roots[0], "; ".join(why for _, why in blocks[:5])
                      + (f"; and {len(blocks) - 5} more" if len(blocks) > 5 else "")
                      + (f" (also blocked by {', '.join(roots[1:4])})" if len(roots) > 1 else "")
                      + f" ({fine} other pair{'s' if fine != 1 else ''} fine)")
    if tried and not passed and all(t.skipped for t in tried):
        pytest.skip(tried[0].why)


def _combined(item_pair: tuple[str, str], reds: Sequence[Problem], total: int) -> Problem:
    """One red for several failing pairs of one per-node item: each pair's own text, in turn."""
    a, b = item_pair
    node = a if b == "*" else b
    peers = [p.nodes[-1] if b == "*" else p.nodes[0] for p in reds]
    causes = {p.cause for p in reds}
    fixes = {f.key(): f for p in reds for f in p.fixes}
    # each pair's text; a fix said beside the text (not in it) once, at the end
    apart = [p.fix for p in reds if p.text() != p.message.rstrip()]
    return Problem(
        (node,), causes.pop() if len(causes) == 1 else OutcomeCause.SEVERAL_PAIRS,
        f"{a} -> {b}: {len(reds)} of {total} pairs fail ({', '.join(peers)}):\n"
        + "\n".join(p.message.rstrip() for p in reds), fix="; ".join(dict.fromkeys(apart)),
        item=reds[0].item, scope=Scope.PAIR, fixes=tuple(fixes.values()),
        pairs=tuple(pair for p in reds for pair in (p.pairs or (tuple(p.nodes[:2]),))
                    if len(pair) == 2))


def _where(params: Mapping[str, object]) -> tuple[str, ...]:
    for name in ("node", "rank0_node"):
        if isinstance(node := params.get(name), str):
            return (node,)
    for name in ("pair", "rendezvous_leg", "pdsh_leg", "node_pair"):
        got = params.get(name)
        if isinstance(got, tuple):
            return tuple(str(n) for n in got if n != "*")  # node3->*: node3
    if isinstance(site := params.get("launch_site"), str):
        return (site,)
    return ()


class Outcomes:
    """Registered by the plugin: the place for each check's Problem and fixes, the Problem on
    its failed report, and the blocked checks in pytest's last-failed set."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @staticmethod
    def _around(item: pytest.Item):
        """The check's setup and call run with `item` as the current check."""
        token = _ITEM.set(item)
        try:
            return (yield)
        finally:
            _ITEM.reset(token)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        return (yield from self._around(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        return (yield from self._around(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        exc = call.excinfo.value if call.excinfo is not None else None
        if report.skipped and isinstance(exc, Blocked):
            for props in (report.user_properties, item.user_properties):
                if (BLOCKED_BY, exc.root) not in props:
                    props.append((BLOCKED_BY, exc.root))
        if report.when == "teardown" or not report.failed:
            return report
        params = getattr(getattr(item, "callspec", None), "params", {})
        problem = item.stash.get(PROBLEM_KEY, None)
        if problem is None:
            crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "")
            problem = unjudged(_where(params), report_text(report.longreprtext), item.name,
                               headline=str(crash or ""))
        # on the report (the summary reads it) and on the item (JUnit writes the item's)
        prop = (PROPERTY, problem.to_json())
        report.user_properties = [*(p for p in report.user_properties if p[0] != PROPERTY), prop]
        item.user_properties[:] = [*(p for p in item.user_properties if p[0] != PROPERTY), prop]
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport
                                 ) -> tuple[str, str, str] | None:
        """A blocked check is counted as "blocked", not "skipped", and one that does not apply
        here (no GPU, no RDMA device, no --output-dir) as "not applicable": pytest's final line
        says how many of each ("60 blocked, 50 not applicable"), and its short summary (``-ra``)
        lists no line per check of either (the verdict counts the blocked per red, and says in
        one line per kind what could not run here and why: report/summary.py)."""
        if not report.skipped:
            return None
        if any(k == BLOCKED_BY for k, _ in report.user_properties):
            return "blocked", "b", "BLOCKED"
        return NOT_APPLICABLE, "s", "NOT APPLICABLE"

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """`pytest --lf` after the fix reruns the root and every check it blocked: pytest's
        last-failed set holds only failures, so the blocked ones are added to it here (after
        the cache plugin has dropped them as skipped)."""
        if not report.skipped or not any(k == BLOCKED_BY for k, _ in report.user_properties):
            return
        pytestprivate.mark_last_failed(self.config, report.nodeid)
