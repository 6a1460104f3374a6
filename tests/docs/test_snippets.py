"""Every code block in the documentation runs: each page's ```bash and ```python blocks in order
against an Apache Kafka broker the test starts, its policy ```yaml blocks through the policy
loader (tests/support/snippets.py says what runs and the directives that change it).

A page runs with the repository's top as its working directory, as a reader at the top of a clone
types it, with `.venv/bin` first on PATH, HOME and TMPDIR in a scratch directory, and its own
application id, web port and data directory; it must leave the checkout as it found it. The
runner's own tests come first and need no broker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.devkit.brokers import KafkaBroker, free_port
from streams.settings import ENV_PREFIX
from streams.topic_names import Topics
from tests.support.snippets import (
    PageRunner,
    SnippetError,
    SnippetFailure,
    git_status,
    parse_blocks,
)

REPO = Path(__file__).resolve().parents[2]
# Generated from the code when the site is built: nothing in them is written by hand.
GENERATED = REPO / "docs" / "reference"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
# Set in a page's blocks: a block that runs the test suite (scripts/test.sh without its skip)
# must not run the pages again inside itself, and so on down.
INSIDE_A_PAGE = "DOCS_SNIPPETS_PAGE"
# Where this machine keeps the Apache Kafka kit: kept from the suite's environment, while every
# worker setting a reader would not have set is dropped.
MACHINE_VARIABLES = {
    f"{ENV_PREFIX}KAFKA_HOME",
    f"{ENV_PREFIX}KAFKA_POM",
    f"{ENV_PREFIX}KAFKA_VERSION",
}
PAGES = sorted(
    str(path.relative_to(REPO))
    for path in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    if path.is_file() and not path.is_relative_to(GENERATED)
)


def _blocks(markdown: str) -> list[tuple[int, str, str, str | None, str]]:
    page = Path("page.md")
    return [
        (b.line, b.language, b.text, b.directive, b.skip_reason)
        for b in parse_blocks(textwrap.dedent(markdown), page)
    ]


def _python() -> Path:
    return VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable)


def _runner(tmp_path: Path, **options: float) -> PageRunner:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    return PageRunner(tmp_path, env, tmp_path, _python(), **options)


def _run(tmp_path: Path, markdown: str, **options: float) -> PageRunner:
    with _runner(tmp_path, **options) as runner:
        runner.run(parse_blocks(textwrap.dedent(markdown), tmp_path / "page.md"))
    return runner


# The fence parser.


def test_fences_of_backticks_and_tildes_with_attributes_are_read_in_order() -> None:
    markdown = """\
        Text with ```inline``` code is no fence.

        ```bash title="install"
        echo one
        ```

        ~~~Python
        print("two")
        ~~~

        ```
        no language
        ```
        """
    assert _blocks(markdown) == [
        (3, "bash", "echo one\n", None, ""),
        (7, "python", 'print("two")\n', None, ""),
        (11, "", "no language\n", None, ""),
    ]


def test_a_fence_inside_a_list_item_loses_its_indent_and_keeps_the_rest() -> None:
    markdown = """\
        1. Start it:

           ```bash
           if true; then
             echo nested
           fi
           ```
        2. Done.
        """
    assert _blocks(markdown) == [(3, "bash", "if true; then\n  echo nested\nfi\n", None, "")]


def test_a_longer_fence_holds_a_shorter_one_and_a_tilde_fence_holds_backticks() -> None:
    markdown = """\
        ````markdown
        ```bash
        echo shown
        ```
        ````
        ~~~text
        ```
        ~~~
        """
    assert _blocks(markdown) == [
        (1, "markdown", "```bash\necho shown\n```\n", None, ""),
        (6, "text", "```\n", None, ""),
    ]


def test_a_fence_that_never_closes_is_an_error_naming_its_line() -> None:
    with pytest.raises(SnippetError, match=r"page.md:3: the fence ``` opened here never closes"):
        _blocks("Text\n\n```bash\necho unfinished\n")


# Directives.


def test_directives_on_the_line_before_a_fence_mark_it() -> None:
    markdown = """\
        <!-- run: background -->
        ```bash
        claimstream dev
        ```
        - In a list:
          <!--  run:  skip: needs a Kubernetes cluster  -->
          ```bash
          kubectl apply -k deploy/
          ```
        """
    assert _blocks(markdown) == [
        (2, "bash", "claimstream dev\n", "background", ""),
        (7, "bash", "kubectl apply -k deploy/\n", "skip", "needs a Kubernetes cluster"),
    ]


@pytest.mark.parametrize(
    ("markdown", "problem"),
    [
        ("<!-- run: skip -->\n```bash\nx\n```\n", r"page.md:1: `run: skip` needs a reason"),
        ("<!-- run: skip:   -->\n```bash\nx\n```\n", r"page.md:1: `run: skip` needs a reason"),
        ("<!-- run: later -->\n```bash\nx\n```\n", r"page.md:1: unknown directive `run: later`"),
        ("<!-- run: background -->\n\n```bash\nx\n```\n", r"page.md:1: a run directive with no"),
        ("text <!-- run: skip: why -->\n```bash\nx\n```\n", r"page.md:1: a run directive is one"),
        ("Last line\n<!-- run: background -->\n", r"page.md:2: a run directive with no fence"),
    ],
)
def test_a_directive_that_is_unknown_incomplete_or_astray_is_an_error(
    markdown: str, problem: str
) -> None:
    with pytest.raises(SnippetError, match=problem):
        _blocks(markdown)


def test_a_directive_shown_inside_a_block_is_text() -> None:
    markdown = """\
        ~~~markdown
        <!-- run: sometime -->
        ~~~
        """
    assert _blocks(markdown) == [(1, "markdown", "<!-- run: sometime -->\n", None, "")]


def test_background_on_a_block_that_does_not_run_is_an_error(tmp_path: Path) -> None:
    markdown = "```bash\ntouch ran\n```\n<!-- run: background -->\n```text\nout\n```\n"
    with pytest.raises(SnippetError, match=r"page.md:5: `run: background` on a ```text block"):
        _run(tmp_path, markdown)
    assert not (tmp_path / "ran").exists()


# Running a page.


def test_blocks_run_in_order_sharing_the_working_directory_and_skips_are_listed(
    tmp_path: Path,
) -> None:
    runner = _run(
        tmp_path,
        """\
        ```bash
        echo first > order.txt
        ```
        <!-- run: skip: shown for a cluster this page has not got -->
        ```bash
        echo skipped >> order.txt
        ```
        ```python
        from pathlib import Path
        Path("order.txt").write_text(Path("order.txt").read_text() + "second\\n")
        ```
        ```text
        echo shown >> order.txt
        ```
        """,
    )
    assert (tmp_path / "order.txt").read_text() == "first\nsecond\n"
    result = runner.result
    assert ([b.line for b in result.ran], [b.line for b in result.shown]) == ([1, 8], [12])
    assert result.summary("page.md").splitlines() == [
        "page.md: 2 run, 0 policies loaded, 1 skipped, 1 shown",
        f"  skipped {tmp_path / 'page.md'}:5: shown for a cluster this page has not got",
    ]


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("```bash\necho before\nexit 3\n```\n", "exited with status 3"),
        ("```sh\necho before; echo $UNSET_IN_THE_DOCS\n```\n", "exited with status 1"),
        ("```shell\necho before; false | cat\necho after\n```\n", "exited with status 1"),
        ("```python\nprint('before')\nraise SystemExit('boom')\n```\n", "exited with status 1"),
    ],
)
def test_a_failing_block_fails_the_page_showing_its_line_text_and_output(
    tmp_path: Path, block: str, expected: str
) -> None:
    with pytest.raises(SnippetFailure) as failure:
        _run(tmp_path, "Intro\n\n" + block + "```bash\ntouch not-reached\n```\n")
    message = str(failure.value)
    assert f"page.md:3: the ```{block[3:].split()[0]} block {expected}" in message
    assert block.splitlines()[1] in message  # the block's text
    assert "--- output ---\nbefore\n" in message
    assert not (tmp_path / "not-reached").exists()


def test_a_python_block_fails_with_its_traceback_naming_the_line(tmp_path: Path) -> None:
    with pytest.raises(SnippetFailure, match=r'(?s)block-line-1.py", line 2.*ZeroDivisionError'):
        _run(tmp_path, "```python\nx = 1\nprint(x / 0)\n```\n")


def test_a_block_that_runs_too_long_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(SnippetFailure, match="did not finish in 1 s"):
        _run(
            tmp_path,
            "```bash\n(sleep 60; touch late) &\necho $! > child\nsleep 60\n```\n",
            timeout_s=1,
        )
    assert time.monotonic() - started < 20
    child = int((tmp_path / "child").read_text())
    assert not _alive(child)


def test_a_policy_yaml_block_must_load_and_other_yaml_is_shown(tmp_path: Path) -> None:
    policy = (REPO / "examples" / "policy.yaml").read_text()
    fenced = "```yaml\n" + policy + "```\n"
    runner = _run(tmp_path, fenced + "```yaml\nsigning: {required: true}\n```\n")
    assert ([b.line for b in runner.result.policies], [b.line for b in runner.result.shown]) == (
        [1],
        [len(fenced.splitlines()) + 1],
    )
    broken = "```yaml\nversion: '1'\nsources: {}\nfields:\n  a.b: {type: enum, freshnes: 5m}\n```\n"
    with pytest.raises(SnippetFailure, match=r"(?s)is not a policy the loader takes.*freshnes"):
        _run(tmp_path, broken)


def test_a_background_block_runs_beside_the_later_blocks_and_is_stopped_by_sigint(
    tmp_path: Path,
) -> None:
    runner = _run(
        tmp_path,
        """\
        <!-- run: background -->
        ```bash
        trap 'echo stopped > stopped; exit 0' INT
        echo $$ > pid
        while true; do sleep 0.1; done
        ```
        ```bash
        for _ in $(seq 100); do [ -s pid ] && break; sleep 0.1; done
        kill -0 "$(cat pid)"
        ```
        """,
    )
    assert [b.line for b in runner.result.ran] == [2, 7]
    assert (tmp_path / "stopped").read_text() == "stopped\n"
    assert not _alive(int((tmp_path / "pid").read_text()))


def test_a_failing_block_shows_what_the_background_blocks_printed(tmp_path: Path) -> None:
    markdown = """\
        <!-- run: background -->
        ```bash
        echo worker started on port 6066
        sleep 60
        ```
        ```bash
        sleep 0.5
        exit 2
        ```
        """
    with pytest.raises(SnippetFailure) as failure:
        _run(tmp_path, markdown)
    assert "line 6" in str(failure.value)
    assert "the background block at line 2 ---\nworker started on port 6066" in str(failure.value)


def test_a_background_block_that_dies_early_fails_with_its_output(tmp_path: Path) -> None:
    markdown = """\
        <!-- run: background -->
        ```bash
        echo cannot bind the port
        exit 4
        ```
        ```bash
        sleep 1
        ```
        """
    with pytest.raises(SnippetFailure, match=r"(?s)exited early with status 4.*cannot bind"):
        _run(tmp_path, markdown)


def test_a_background_block_that_ignores_sigint_fails_and_is_killed(tmp_path: Path) -> None:
    markdown = """\
        <!-- run: background -->
        ```bash
        trap '' INT
        echo $$ > pid
        while true; do sleep 0.1; done
        ```
        ```bash
        for _ in $(seq 100); do [ -s pid ] && break; sleep 0.1; done
        ```
        """
    with pytest.raises(SnippetFailure, match="did not exit within 1 s of SIGINT"):
        _run(tmp_path, markdown, stop_timeout_s=1)
    assert not _alive(int((tmp_path / "pid").read_text()))


def test_a_file_left_in_the_checkout_shows_in_its_status(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    before = git_status(tmp_path)
    (tmp_path / "rejected.jsonl").write_text("{}\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "page.cpython-311.pyc").write_bytes(b"")  # Python's, not a block's
    assert git_status(tmp_path) == sorted([*before, "?? rejected.jsonl"])


def _alive(pid: int) -> bool:
    # The runner reaped what it started; a pid that still answers is still running.
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    return True


# The pages.


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaBroker]:
    with KafkaBroker(partitions=4) as broker:
        yield broker


def _page_env(scratch: Path, bootstrap: str, page: str) -> dict[str, str]:
    """The reader's shell: the venv first on PATH, a home and temporary files of the page's own,
    and the settings that keep one page's topics, groups, port and state from another's on the
    shared broker (its own app id and topic names, as tests/stream's deployments have)."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if (not name.startswith(ENV_PREFIX) or name in MACHINE_VARIABLES)
        and name not in {"VIRTUAL_ENV", "PYTHONPATH"}
    }
    for folder in ("home", "tmp", "data"):
        (scratch / folder).mkdir()
    name = Path(page).with_suffix("").as_posix().removeprefix("docs/")
    slug = "".join(c if c.isalnum() else "-" for c in name)
    app_id = f"docs-{slug}-{uuid.uuid4().hex[:6]}"
    topics = {
        f"{ENV_PREFIX}TOPIC_{name.upper()}": f"{app_id}.{topic}"
        for name, topic in Topics().model_dump().items()
    }
    return {
        **inherited,
        **topics,
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(scratch / "home"),
        "TMPDIR": str(scratch / "tmp"),
        f"{ENV_PREFIX}BROKER": f"kafka://{bootstrap}",
        f"{ENV_PREFIX}APP_ID": app_id,
        f"{ENV_PREFIX}WEB_PORT": str(free_port()),
        f"{ENV_PREFIX}DATA_DIR": str(scratch / "data"),
        INSIDE_A_PAGE: page,
    }


@pytest.mark.integration
@pytest.mark.skipif(INSIDE_A_PAGE in os.environ, reason="run by a page's block: pages run once")
@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_runs(page: str, kafka: KafkaBroker, tmp_path: Path) -> None:
    blocks = parse_blocks((REPO / page).read_text(encoding="utf-8"), Path(page))
    before = git_status(REPO)
    env = _page_env(tmp_path, kafka.bootstrap, page)
    with PageRunner(REPO, env, tmp_path / "tmp", _python()) as runner:
        result = runner.run(blocks)
    after = git_status(REPO)
    # Each path as `git status --porcelain --ignored` shows it before the page or after it.
    changed = sorted(set(after) ^ set(before))
    assert changed == [], f"{page}: its blocks changed the checkout: {changed}"
    if result.skipped:
        print(result.summary(page))  # the suite's summary lists every skipped block's reason
