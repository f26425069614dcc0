"""Secret values masked in what every reporter (terminal, JUnit, JSON, HTML) shows of a test:
its failure text, captured sections and properties (the Problem on the report too: the
makereport wrapper runs around core.outcome's, which puts it there)."""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest

from cluster_tests.report.summary import Recorder, mask


class SecretMasker:
    """A plugin: `secrets()` gives the values to hide (the cluster's, read when a report is
    made); the recorder learns them too, for what it writes itself."""

    def __init__(self, secrets: Callable[[], set[str]], recorder: Recorder) -> None:
        self.secrets = secrets
        self.recorder = recorder

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        secrets = self.secrets()
        self.recorder.secrets |= secrets
        if secrets:
            masked_report(report, secrets)
        return report


def masked_report(report: pytest.TestReport, secrets: set[str]) -> None:
    """`report` with every secret value masked, in place."""
    if report.longrepr is not None:
        text = report.longreprtext
        masked = mask(text, secrets)
        if masked != text:
            report.longrepr = masked
    report.sections = [(title, mask(body, secrets)) for title, body in report.sections]
    report.user_properties = [(k, mask(str(v), secrets)) for k, v in report.user_properties]
