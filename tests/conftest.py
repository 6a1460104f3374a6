"""Suite-wide reporting: the figures passing tests print, without the rest of their output; and
how many examples the property tests that ask (`examples`) run.

Passing tests keep their output captured (a passing broker test's aiokafka retry log alone ran to
84k lines); what a test prints on stdout (checker verdicts, throughput and recovery figures) is
collected here and shown once, in a "figures" section at the end of the run. A failing test that
started workers shows what each was doing (its threads' stacks and its log's tail).
`--examples-scale N` multiplies the examples of the tests that ask: scripts/test.sh runs the
shortcuts' equivalence to the rules table (tests/core/rules/test_shortcuts.py) again at 10.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.stream.support import STARTED
from tests.support.examples import set_scale

FIGURES: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--examples-scale",
        type=int,
        default=1,
        metavar="N",
        help="run N times the examples of the property tests that ask (tests.support.examples)",
    )


def pytest_configure(config: pytest.Config) -> None:
    set_scale(config.getoption("--examples-scale"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "setup":
        STARTED.clear()
    elif call.when == "call" and report.failed:
        for worker in STARTED:
            report.sections.append((f"worker {worker.data_dir.name}", worker.diagnosis()))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        FIGURES.extend(line for line in report.capstdout.splitlines() if line.strip())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
