"""setuptools' entry for the extension modules; everything else is in pyproject.toml.

With `CLAIMSTREAM_USE_MYPYC=1` the modules of `build_backend.compiled.COMPILED` are compiled by
mypyc; without it there are no extension modules and the wheel is pure Python.
"""

from setuptools import setup

from build_backend.compiled import extensions

setup(ext_modules=extensions())
