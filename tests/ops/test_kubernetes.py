"""The Kubernetes defaults a platform team relies on: reads private to the workers and
Prometheus, and every credential from a Secret (deploy/kubernetes and its example overlay
deploy/kubernetes-example), rendered by `kubectl kustomize` as `kubectl apply -k` sends them.
"""

from __future__ import annotations

from typing import Any

from streams.settings import Settings
from tests.ops.kustomize import REPO, rendered, rendered_kind

EXAMPLE = REPO / "deploy" / "kubernetes-example"
WORKER_LABELS = {"app.kubernetes.io/name": "claimstream-worker"}
SECRET_VARIABLES = {
    f"CLAIMSTREAM_{name.upper()}"
    for name, field in Settings.model_fields.items()
    if "SecretStr" in str(field.annotation)
}


def worker_container(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (statefulset,) = rendered_kind(objects, "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_the_web_port_answers_only_the_workers_and_prometheus() -> None:
    objects = rendered()
    (policy,) = rendered_kind(objects, "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == WORKER_LABELS
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"port": "web", "protocol": "TCP"}]
    peers, prometheus = rule["from"]
    assert peers == {"podSelector": {"matchLabels": WORKER_LABELS}}
    assert prometheus["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    assert "namespaceSelector" in prometheus  # Prometheus of one namespace, not every namespace
    assert not [peer for peer in rule["from"] if "ipBlock" in peer or not peer]

    # The probes and the PodMonitor use that same named port, bound on every interface.
    _, container = worker_container(objects)
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["CLAIMSTREAM_WEB_HOST"] == "0.0.0.0"
    assert {port["name"] for port in container["ports"]} == {"web"}
    assert container["livenessProbe"]["httpGet"]["port"] == "web"


def test_the_example_overlay_takes_every_credential_from_a_secret() -> None:
    assert {"CLAIMSTREAM_SASL_PASSWORD", "CLAIMSTREAM_SCHEMA_REGISTRY_PASSWORD"} <= SECRET_VARIABLES
    base = rendered()
    objects = rendered(EXAMPLE)
    assert rendered_kind(objects, "Secret") == []  # made outside git, only referred to
    assert len(rendered_kind(objects, "NetworkPolicy")) == 1
    pod, container = worker_container(objects)
    env = {item["name"]: item for item in container["env"]}
    for name in ("CLAIMSTREAM_SASL_PASSWORD", "CLAIMSTREAM_SCHEMA_REGISTRY_PASSWORD"):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "claimstream-credentials"
    assert env["CLAIMSTREAM_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"

    tokens = env["CLAIMSTREAM_STEWARD_TOKENS_FILE"]["value"]
    mount = next(m for m in container["volumeMounts"] if tokens.startswith(m["mountPath"] + "/"))
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "claimstream-steward-tokens"

    # Nowhere a secret setting with a literal value, in the base or the overlay.
    for rendering in (base, objects):
        _, worker = worker_container(rendering)
        literal = {item["name"] for item in worker["env"] if "value" in item}
        assert literal & SECRET_VARIABLES == set()
    # The overlay changes the base by these additions only.
    _, base_container = worker_container(base)
    base_env = {item["name"]: item for item in base_container["env"]}
    assert {name: env[name] for name in base_env} == base_env
