"""Suite-wide reporting: the figures passing tests print, without the rest of their output.

Passing tests keep their output captured (a passing broker test's aiokafka retry log alone ran to
84k lines); what a test prints on stdout (checker verdicts, throughput and recovery figures) is
collected here and shown once, in a "figures" section at the end of the run.
"""

from __future__ import annotations

import pytest

FIGURES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        FIGURES.extend(line for line in report.capstdout.splitlines() if line.strip())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
