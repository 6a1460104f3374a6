"""How many examples the property tests that ask run: `--examples-scale N` (tests/conftest.py)
multiplies them; scripts/test.sh runs the shortcuts' equivalence to the rules table
(tests/core/rules/test_shortcuts.py) again at 10."""

from __future__ import annotations

_scale = [1]  # set once, by pytest_configure, before any test module is collected


def set_scale(scale: int) -> None:
    _scale[0] = scale


def examples(count: int) -> int:
    """`count` examples times `--examples-scale`, for a test's `settings(max_examples=...)`: read
    as its module is collected, after pytest_configure has read the option."""
    return count * _scale[0]
