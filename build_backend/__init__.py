"""The PEP 517 build backend: setuptools, plus mypyc when `CLAIMSTREAM_USE_MYPYC=1`.

It sits between the packaging front end (pip, `python -m build`) and setuptools. With the switch
off (the default) the wheel is pure Python (py3-none-any); with it on, `setup.py` compiles the
modules listed in `build_backend.compiled.COMPILED` and the wheel is platform-specific, its
extension modules shadowing the `.py` files beside them. The pattern is charset-normalizer's
(`CHARSET_NORMALIZER_USE_MYPYC`). This package is build tooling: it never ships in the wheel.

Only `build_wheel` and `build_editable` compile. The other hooks run setup.py with the switch
off: the requirements they report and the metadata and sdist they write do not depend on it, and
the requirement hooks run before mypyc is installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from setuptools import build_meta
from setuptools.build_meta import build_editable, build_wheel

from build_backend.compiled import BUILD_REQUIRES, SWITCH, use_mypyc

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

Result = TypeVar("Result")


@contextmanager
def _switched_off() -> Iterator[None]:
    before = os.environ.get(SWITCH)
    os.environ[SWITCH] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = before


def _without_compile(hook: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    with _switched_off():
        return hook(*args, **kwargs)


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    compile_needs = list(BUILD_REQUIRES) if use_mypyc() else []
    setuptools_needs = _without_compile(build_meta.get_requires_for_build_wheel, config_settings)
    return [*setuptools_needs, *compile_needs]


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    compile_needs = list(BUILD_REQUIRES) if use_mypyc() else []
    setuptools_needs = _without_compile(build_meta.get_requires_for_build_editable, config_settings)
    return [*setuptools_needs, *compile_needs]


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _without_compile(build_meta.get_requires_for_build_sdist, config_settings)


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    return _without_compile(build_meta.build_sdist, sdist_directory, config_settings)


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    return _without_compile(
        build_meta.prepare_metadata_for_build_wheel, metadata_directory, config_settings
    )


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    return _without_compile(
        build_meta.prepare_metadata_for_build_editable, metadata_directory, config_settings
    )
