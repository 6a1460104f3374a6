"""The documentation's code blocks, found and run (tests/docs/test_snippets.py).

A page's fenced blocks are read as CommonMark reads them (``` or ~~~, three or more, indented
inside list items, an info string whose first word is the language and whose rest may carry
attributes such as `title="x"`). ```bash / ```sh / ```shell blocks are commands a reader types and
```python blocks are programs: both run, in the page's order, with `bash -euo pipefail` and the
project's Python. ```yaml blocks that are policies (a mapping with `version` and `fields`) must
load with the project's policy loader. Every other block is shown, not run.

A directive is an HTML comment on the line right before a fence:
`<!-- run: background -->` starts the block, runs the page's later blocks, then stops it with
SIGINT to its process group; `<!-- run: skip: REASON -->` does not run it (the reason is
required and reported). Anything else after `<!-- run:` is a mistake, and so is a directive
that no fence follows.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from streams.core.records.errors import PolicyError
from streams.core.records.policy import policy_from_text

SHELL_LANGUAGES = frozenset({"bash", "sh", "shell"})
PYTHON_LANGUAGES = frozenset({"python", "py"})
BLOCK_TIMEOUT_S = 300.0  # a page that waits for a worker on a busy machine bounds its own wait
# A background block gets this long to exit after SIGINT (a worker commits and closes first).
STOP_TIMEOUT_S = 30.0
OUTPUT_TAIL_CHARS = 6000
# What Python and the tools write beside the code wherever they run: never a block's leftovers.
_TOOL_CACHES = ("__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache")

_OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*run\s*:(?P<body>.*?)-->\s*$")
_DIRECTIVE_START = re.compile(r"<!--\s*run\s*:")


class SnippetError(Exception):
    """A page whose blocks cannot be read (an unclosed fence, a bad directive)."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the opening fence's line, counted from 1
    language: str
    info: str
    text: str
    directive: str | None = None  # "background" or "skip"
    skip_reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in SHELL_LANGUAGES | PYTHON_LANGUAGES

    @property
    def is_policy(self) -> bool:
        if self.language not in {"yaml", "yml"}:
            return False
        try:
            data = yaml.safe_load(self.text)
        except yaml.YAMLError:
            return False  # a fragment or several documents: shown, not a policy
        return isinstance(data, dict) and "version" in data and "fields" in data


def _language(info: str) -> str:
    first = info.strip().split(maxsplit=1)[0] if info.strip() else ""
    # `{.bash title="x"}` (Pandoc-style attributes) names the language as its first class.
    first = first.lstrip("{").lstrip(".").rstrip("}")
    return first.split("{", 1)[0].lower()


def _directive(previous: str, page: Path, line: int) -> tuple[str | None, str]:
    match = _DIRECTIVE.match(previous)
    if match is None:
        if _DIRECTIVE_START.search(previous):
            raise SnippetError(f"{page}:{line - 1}: a run directive is one comment on its own line")
        return None, ""
    body = match.group("body").strip()
    if body == "background":
        return "background", ""
    kind, _, reason = body.partition(":")
    if kind.strip() == "skip":
        if not reason.strip():
            raise SnippetError(f"{page}:{line - 1}: `run: skip` needs a reason after a colon")
        return "skip", reason.strip()
    raise SnippetError(
        f"{page}:{line - 1}: unknown directive `run: {body}` (known: background, skip: REASON)"
    )


def _closes(line: str, fence: str) -> bool:
    """A closing fence: the opening's character, at least as many, nothing else on the line."""
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _dedent(line: str, indent: int) -> str:
    """A content line without up to `indent` leading blanks (the opening fence's indent)."""
    removable = len(line) - len(line.lstrip(" \t"))
    return line[min(indent, removable) :]


def _opening(line: str) -> re.Match[str] | None:
    match = _OPENING.match(line)
    # A backtick fence's info string holds no backtick (CommonMark): ```a``` is inline code.
    if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
        return None
    return match


def parse_blocks(text: str, page: Path) -> list[Block]:
    """Every fenced block of a Markdown text, in order, with the directive right before it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: int | None = None  # the line of a directive that no fence has taken yet
    index = 0
    while index < len(lines):
        opening = _opening(lines[index])
        if opening is None:
            if pending is not None:
                raise SnippetError(
                    f"{page}:{pending + 1}: a run directive with no fence right after it"
                )
            if _DIRECTIVE_START.search(lines[index]):
                pending = index
            index += 1
            continue
        fence, indent, info = opening["fence"], len(opening["indent"]), opening["info"]
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines) and not _closes(lines[index], fence):
            body.append(_dedent(lines[index], indent))
            index += 1
        if index == len(lines):
            raise SnippetError(f"{page}:{start + 1}: the fence {fence} opened here never closes")
        directive, reason = (None, "")
        if pending is not None:
            directive, reason = _directive(lines[pending], page, start + 1)
            pending = None
        text_ = "\n".join(body) + "\n" if body else ""
        blocks.append(
            Block(page, start + 1, _language(info), info.strip(), text_, directive, reason)
        )
        index += 1
    if pending is not None:
        raise SnippetError(f"{page}:{pending + 1}: a run directive with no fence right after it")
    return blocks


def check_block_directives(block: Block) -> None:
    if block.directive == "background" and not block.runs:
        raise SnippetError(f"{block.where}: `run: background` on a ```{block.language} block")


@dataclass
class Background:
    block: Block
    process: subprocess.Popen[bytes]
    output: Path


@dataclass
class PageRun:
    """What running one page did: the blocks run, skipped (with reasons) and loaded as policies."""

    ran: list[Block] = field(default_factory=list)
    skipped: list[Block] = field(default_factory=list)
    policies: list[Block] = field(default_factory=list)
    shown: list[Block] = field(default_factory=list)

    def summary(self, page: str) -> str:
        lines = [
            f"{page}: {len(self.ran)} run, {len(self.policies)} policies loaded, "
            f"{len(self.skipped)} skipped, {len(self.shown)} shown"
        ]
        lines += [f"  skipped {b.where}: {b.skip_reason}" for b in self.skipped]
        return "\n".join(lines)


class SnippetFailure(AssertionError):
    pass


def _failure(block: Block, why: str, output: str) -> SnippetFailure:
    tail = output[-OUTPUT_TAIL_CHARS * 2 :]
    cut = "...\n" if len(output) > len(tail) else ""
    return SnippetFailure(
        f"{block.where}: the ```{block.language} block {why}\n"
        f"--- block (line {block.line}) ---\n{block.text}"
        f"--- output ---\n{cut}{tail}"
    )


def _command(block: Block, scratch: Path, python: Path) -> list[str]:
    if block.language in PYTHON_LANGUAGES:
        # From a file, so that a traceback names the block's lines.
        program = scratch / f"block-line-{block.line}.py"
        program.write_text(block.text, encoding="utf-8")
        return [str(python), str(program)]
    return ["bash", "-euo", "pipefail", "-c", block.text]


class PageRunner:
    """Runs one page's blocks in order in `cwd` with `env`; stops what its background blocks
    started whatever happens (use it as a context manager)."""

    def __init__(
        self,
        cwd: Path,
        env: Mapping[str, str],
        scratch: Path,
        python: Path,
        timeout_s: float = BLOCK_TIMEOUT_S,
        stop_timeout_s: float = STOP_TIMEOUT_S,
    ) -> None:
        self.cwd, self.env, self.scratch, self.python = cwd, dict(env), scratch, python
        self.timeout_s, self.stop_timeout_s = timeout_s, stop_timeout_s
        self.background: list[Background] = []
        self.result = PageRun()

    def __enter__(self) -> PageRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        for started in self.background:
            if started.process.poll() is None:
                _stop(started.process, self.stop_timeout_s)

    def run(self, blocks: list[Block]) -> PageRun:
        for block in blocks:  # a misplaced directive fails the page before any block runs
            check_block_directives(block)
        for block in blocks:
            if block.directive == "skip":
                self.result.skipped.append(block)
            elif block.is_policy:
                self._load_policy(block)
            elif not block.runs:
                self.result.shown.append(block)
            elif block.directive == "background":
                self._start(block)
            else:
                self._check_background()
                self._run(block)
        self._check_background()
        self._stop_background()
        return self.result

    def _load_policy(self, block: Block) -> None:
        try:
            policy_from_text(block.text, block.where)
        except PolicyError as exc:
            raise _failure(block, "is not a policy the loader takes", str(exc)) from exc
        self.result.policies.append(block)

    def _run(self, block: Block) -> None:
        process = subprocess.Popen(
            _command(block, self.scratch, self.python),
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout stops all it started
        )
        try:
            stdout, _ = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _killpg(process.pid)
            stdout, _ = process.communicate()
            output = stdout.decode(errors="replace")
            why = f"did not finish in {self.timeout_s:.0f} s"
            raise _failure(block, why, output + self._background_output()) from None
        output = stdout.decode(errors="replace")
        if process.returncode != 0:
            why = f"exited with status {process.returncode}"
            raise _failure(block, why, output + self._background_output())
        self.result.ran.append(block)

    def _background_output(self) -> str:
        """What the background blocks printed so far: a block that fails against a worker often
        fails because of the worker."""
        return "".join(
            f"\n--- meanwhile, the background block at line {started.block.line} ---\n"
            + _read(started.output)[-OUTPUT_TAIL_CHARS // 2 :]
            for started in self.background
        )

    def _start(self, block: Block) -> None:
        output = self.scratch / f"background-line-{block.line}.log"
        with output.open("wb") as sink:
            process = subprocess.Popen(
                _command(block, self.scratch, self.python),
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, stopped as a whole
            )
        self.background.append(Background(block, process, output))
        self.result.ran.append(block)

    def _check_background(self) -> None:
        for started in self.background:
            status = started.process.poll()
            if status is not None and status != 0:
                raise _failure(
                    started.block,
                    f"(run: background) exited early with status {status}",
                    _read(started.output),
                )

    def _stop_background(self) -> None:
        # The last started first: a later block may lean on an earlier one's (dev's broker).
        for started in reversed(self.background):
            if started.process.poll() is not None:
                continue
            if not _stop(started.process, self.stop_timeout_s):
                raise _failure(
                    started.block,
                    f"(run: background) did not exit within {self.stop_timeout_s:.0f} s of SIGINT",
                    _read(started.output),
                )


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _stop(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """SIGINT to the process group, as Ctrl-C would; SIGKILL if it is still there after
    `timeout_s`. True when SIGINT was enough."""
    try:
        os.killpg(process.pid, signal.SIGINT)
    except ProcessLookupError:
        return True
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _killpg(process.pid)
        process.wait()
        return False
    _killpg(process.pid)  # what the block left behind in its group, if anything
    return True


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def git_status(repo: Path) -> list[str]:
    """What `git status` reports in the checkout, ignored files included (a block's leftovers
    under /var/ or build/ are leftovers too)."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(
        line
        for line in done.stdout.splitlines()
        if not any(cache in line for cache in _TOOL_CACHES)
    )
