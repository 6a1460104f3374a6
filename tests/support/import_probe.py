"""What importing some modules drags in, measured in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable


def loaded_after_importing(modules: Iterable[str], packages: Iterable[str]) -> list[str]:
    """The modules of `packages` (or their subpackages) that a fresh `import` of `modules` loads."""
    script = (
        "import json, sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"packages = {sorted(packages)!r}\n"
        + "print(json.dumps(sorted(m for m in sys.modules"
        + " if any(m == p or m.startswith(p + '.') for p in packages))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out))
