"""The Kubernetes manifests as `kubectl apply -k` sends them: `kubectl kustomize` rendered (for
the compose and Kubernetes checks)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"


def rendered(kustomization: Path = KUBERNETES) -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/kubernetes` (or another kustomization): the manifests exactly
    as `kubectl apply -k` sends them."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail(
            "kubectl is not installed: apt-get install kubectl (.ci/run does)", pytrace=False
        )
    result = subprocess.run(
        [kubectl, "kustomize", str(kustomization)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def rendered_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]
