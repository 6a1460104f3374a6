"""The docker-compose deployment, the worker image and the Kubernetes manifests, checked offline.

No Docker engine is needed: docker-compose.yml is validated against the compose specification
(check-jsonschema's vendored `vendor.compose-spec`), and every file a service refers to must exist.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.core.records.policy import parse_policy
from tests.ops.kustomize import KUBERNETES, REPO, rendered, rendered_kind

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "deploy" / "worker" / "Dockerfile"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA_PROVIDERS = REPO / "grafana" / "provisioning" / "dashboards" / "claimstream.yml"
RULES = REPO / "deploy" / "prometheus" / "rules" / "claimstream.rules.yml"

KAFKA_NODES = ("kafka-1", "kafka-2", "kafka-3")
WORKER_ENV = {
    "CLAIMSTREAM_BROKER": ",".join(f"{node}:9092" for node in KAFKA_NODES),
    "CLAIMSTREAM_REPLICATION_FACTOR": "3",
    "CLAIMSTREAM_MIN_INSYNC_REPLICAS": "2",
    "CLAIMSTREAM_STORE": "rocksdb://",
    "CLAIMSTREAM_WEB_HOST": "0.0.0.0",
}
WORKER_ENV_NAMES = {
    "CLAIMSTREAM_BROKER",
    "CLAIMSTREAM_SCHEMA_REGISTRY",
    "CLAIMSTREAM_POLICY",
    "CLAIMSTREAM_STORE",
    "CLAIMSTREAM_WEB_PORT",
    "CLAIMSTREAM_WEB_HOST",
    "CLAIMSTREAM_DATA_DIR",
}


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def workers() -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in services().items()
        if service.get("build", {}).get("dockerfile") == "deploy/worker/Dockerfile"
    }


def interpolate(text: str) -> str:
    """Compose's `${VAR:-default}` / `${VAR-default}` / `$VAR`, from the environment or the
    default."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1) or match.group(4), match.group(3) or ""
        return os.environ.get(name) or default

    return re.sub(r"\$\{(\w+)(:?-([^}]*))?\}|\$(\w+)", value, text)


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(val) for key, val in env.items()}


def volume_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of every volume of a service, short or long syntax."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, _, rest = interpolate(volume).partition(":")
            mounts.append((source, rest.split(":")[0]))
        else:
            mounts.append((interpolate(str(volume.get("source", ""))), volume["target"]))
    return mounts


def is_host_path(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def check_jsonschema_cli_works() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import check_jsonschema.cli"],
        capture_output=True,
        text=True,
        check=False,
    )
    return probe.returncode == 0


def test_compose_file_validates_against_the_compose_specification() -> None:
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.fail("check-jsonschema is not installed: pip install -e '.[dev]'", pytrace=False)
    if check_jsonschema_cli_works():
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "check_jsonschema",
                "--builtin-schema",
                "vendor.compose-spec",
                str(COMPOSE),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return
    # check-jsonschema >= 0.38 needs click >= 8.4, faust-streaming pins click < 8.4: its CLI then
    # cannot start. Validate against the very schema it vendors, with jsonschema directly.
    warnings.warn(
        "check-jsonschema's CLI cannot start here (click too old for it: pin "
        "check-jsonschema<0.38); validating with its vendored compose-spec schema directly",
        stacklevel=1,
    )
    import jsonschema

    spec = importlib.util.find_spec("check_jsonschema")
    assert spec is not None
    assert spec.submodule_search_locations
    schema_path = (
        Path(spec.submodule_search_locations[0])
        / "builtin_schemas"
        / "vendor"
        / "compose-spec.json"
    )
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(compose())
    ]
    assert errors == []


def test_every_file_a_service_refers_to_exists() -> None:
    missing = []
    for name, service in services().items():
        build = service.get("build")
        if build is not None:
            context = REPO / (build if isinstance(build, str) else build.get("context", "."))
            if not context.is_dir():
                missing.append(f"{name}: build context {context}")
            dockerfile = build.get("dockerfile") if isinstance(build, dict) else None
            if dockerfile and not (context / dockerfile).is_file():
                missing.append(f"{name}: dockerfile {dockerfile}")
        for source, _ in volume_mounts(service):
            if is_host_path(source) and not (REPO / source).exists():
                missing.append(f"{name}: volume source {source}")
        env_files = service.get("env_file", [])
        for env_file in [env_files] if isinstance(env_files, str) else env_files:
            path = env_file if isinstance(env_file, str) else env_file["path"]
            if not (REPO / interpolate(path)).is_file():
                missing.append(f"{name}: env_file {path}")
    top = compose()
    for kind in ("configs", "secrets"):
        for name, item in (top.get(kind) or {}).items():
            if "file" in item and not (REPO / interpolate(item["file"])).exists():
                missing.append(f"{kind}.{name}: {item['file']}")
    assert missing == []


def test_named_volumes_are_declared() -> None:
    declared = set(compose().get("volumes") or {})
    used = {
        source
        for service in services().values()
        for source, _ in volume_mounts(service)
        if source and not is_host_path(source)
    }
    assert used <= declared


def test_kafka_runs_as_a_three_node_kraft_cluster_with_a_schema_registry() -> None:
    svc = services()
    voters = {f"{n}@{node}:9093" for n, node in enumerate(KAFKA_NODES, 1)}
    for n, node in enumerate(KAFKA_NODES, 1):
        kafka = svc[node]
        assert kafka["image"] == "apache/kafka:3.9.1"
        env = environment(kafka)
        assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
        assert str(env["KAFKA_NODE_ID"]) == str(n)
        assert set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters
        assert f"PLAINTEXT://{node}:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
        # An acks=all write is acknowledged by two replicas of three: one broker may go.
        for name in ("DEFAULT", "OFFSETS_TOPIC", "TRANSACTION_STATE_LOG"):
            key = f"KAFKA_{name}_REPLICATION_FACTOR"
            assert str(env[key]) == "3", f"{node}: {key}"
        assert str(env["KAFKA_MIN_INSYNC_REPLICAS"]) == "2"
        assert str(env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"]) == "2"
    assert not any("zookeeper" in name for name in svc)
    assert any(
        "schema-registry" in s.get("image", "") or "karapace" in s.get("image", "")
        for s in svc.values()
    )


def test_workers_have_their_settings_and_their_own_state_volume() -> None:
    found = workers()
    assert len(found) >= 2, "at least two worker services"
    state_volumes = []
    for name, service in found.items():
        env = environment(service)
        assert env.keys() >= WORKER_ENV_NAMES, f"{name}: missing {WORKER_ENV_NAMES - env.keys()}"
        for key, value in WORKER_ENV.items():
            assert env[key] == value, f"{name}: {key}={env[key]}"
        assert env["CLAIMSTREAM_STORE"].startswith("rocksdb")
        assert env["CLAIMSTREAM_INSTANCE_ID"] == name, f"{name}: no static membership"
        targets = {target: source for source, target in volume_mounts(service)}
        state = targets.get(env["CLAIMSTREAM_DATA_DIR"])
        assert state, f"{name}: nothing mounted at its RocksDB state directory"
        assert not is_host_path(state), f"{name}: its RocksDB state is not a named volume"
        state_volumes.append(state)
        assert env["CLAIMSTREAM_POLICY"] in targets, f"{name}: policy file not mounted"
    assert len(set(state_volumes)) == len(state_volumes), "workers share a state volume"


def test_prometheus_scrapes_every_worker_and_loads_the_rules() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {t for sc in jobs["claimstream"]["static_configs"] for t in sc["targets"]}
    expected = {
        f"{name}:{environment(service)['CLAIMSTREAM_WEB_PORT']}"
        for name, service in workers().items()
    }
    assert targets == expected
    prometheus = services()["prometheus"]
    mounts = {target: source for source, target in volume_mounts(prometheus)}
    assert mounts["/etc/prometheus/prometheus.yml"] == "./deploy/prometheus/prometheus.yml"
    assert mounts["/etc/prometheus/rules"] == "./deploy/prometheus/rules"
    assert config["rule_files"] == ["rules/*.yml"]
    am_targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am_targets == ["alertmanager:9093"]
    assert "alertmanager" in services()


def test_grafana_mounts_provisioning_and_the_dashboards_where_the_provider_reads() -> None:
    grafana = services()["grafana"]
    mounts = {target: source for source, target in volume_mounts(grafana)}
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    providers = yaml.safe_load(GRAFANA_PROVIDERS.read_text(encoding="utf-8"))["providers"]
    path = providers[0]["options"]["path"]
    assert mounts[path] == "./grafana/dashboards"


def test_worker_dockerfile() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\s*$", text, re.M)
    assert re.search(r'^CMD \["claimstream", "worker"\]\s*$', text, re.M)
    # The image installs the wheel built in the first stage, which carries the schemas.
    assert re.search(r"^RUN pip wheel --no-deps --wheel-dir /wheels \.\s*$", text, re.M)
    assert re.search(r"^RUN pip install /tmp/wheels/claimstream-\*\.whl", text, re.M)
    assert "CLAIMSTREAM_SCHEMAS" not in text
    ignore = DOCKERFILE.with_name("Dockerfile.dockerignore").read_text(encoding="utf-8")
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        for source in line.split()[:-1]:
            assert (REPO / source).exists(), f"COPY source {source} does not exist"
            assert f"!{source.rstrip('/')}" in ignore, f"{source} is not in the build context"


def kubernetes_objects() -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted(KUBERNETES.glob("*.yaml"))
        if path.name != "kustomization.yaml" and path.name not in generated_files()
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc
    ]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [obj for obj in kubernetes_objects() if obj["kind"] == kind]


def kustomization() -> dict[str, Any]:
    return yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text(encoding="utf-8"))


def generated_files() -> set[str]:
    return {f for gen in kustomization()["configMapGenerator"] for f in gen["files"]}


def test_kustomization_lists_every_manifest() -> None:
    listed = set(kustomization()["resources"])
    on_disk = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk - generated_files()


def test_kustomize_renders_hardened_workers_with_their_policy_and_rules() -> None:
    objects = rendered()
    assert {obj["metadata"].get("namespace") for obj in objects if obj["kind"] != "Namespace"} == {
        "claimstream"
    }
    (statefulset,) = rendered_kind(objects, "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert writable == {env["CLAIMSTREAM_DATA_DIR"], "/tmp"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert env["CLAIMSTREAM_LOG_FORMAT"] == "json"

    # The policy ConfigMap is generated with a content hash in its name, and the pods mount it
    # by that name: a policy change is a new name, hence a new pod template, hence a rollout.
    (configmap,) = rendered_kind(objects, "ConfigMap")
    assert re.fullmatch(r"claimstream-policy-[a-z0-9]{10}", configmap["metadata"]["name"])
    policy_volume = next(v for v in pod["volumes"] if v["name"] == "policy")
    assert policy_volume["configMap"]["name"] == configmap["metadata"]["name"]
    policy = parse_policy(yaml.safe_load(configmap["data"]["policy.yaml"]), "policy.yaml")
    assert policy.fields

    (rule,) = rendered_kind(objects, "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]


def test_the_prometheusrule_is_generated_from_the_rules_file() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "prometheus" / "prometheusrule.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_one_scrape_path_the_podmonitor() -> None:
    """Annotations AND a PodMonitor would scrape each pod twice under two job names."""
    (statefulset,) = by_kind("StatefulSet")
    annotations = statefulset["spec"]["template"]["metadata"].get("annotations", {})
    assert not [name for name in annotations if name.startswith("prometheus.io/")]
    assert len(by_kind("PodMonitor")) == 1


def test_kubernetes_statefulset_keeps_rocksdb_state_per_pod() -> None:
    (statefulset,) = by_kind("StatefulSet")
    spec = statefulset["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env.keys() >= WORKER_ENV_NAMES
    assert env["CLAIMSTREAM_STORE"].startswith("rocksdb")
    assert env["CLAIMSTREAM_WEB_HOST"] == "0.0.0.0"
    assert (env["CLAIMSTREAM_REPLICATION_FACTOR"], env["CLAIMSTREAM_MIN_INSYNC_REPLICAS"]) == (
        "3",
        "2",
    )
    (instance,) = [item for item in container["env"] if item["name"] == "CLAIMSTREAM_INSTANCE_ID"]
    assert instance["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    claims = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[env["CLAIMSTREAM_DATA_DIR"]] in claims
    assert container["command"] == ["claimstream", "worker"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()

    (service,) = by_kind("Service")
    assert service["spec"]["clusterIP"] == "None"
    assert spec["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_kubernetes_podmonitor_scrapes_as_job_claimstream() -> None:
    (monitor,) = by_kind("PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "web"
    assert {"targetLabel": "job", "replacement": "claimstream", "action": "replace"} in endpoint[
        "relabelings"
    ]


def published_ports(service: dict[str, Any]) -> list[str]:
    return [str(port) for port in service.get("ports", [])]


def test_published_ports_bind_to_localhost_unless_told_otherwise() -> None:
    for name, service in services().items():
        for port in published_ports(service):
            host_ip = port.rsplit(":", 2)[0]
            assert host_ip == "${CLAIMSTREAM_BIND_ADDRESS:-127.0.0.1}", (name, port)


def test_grafana_has_no_anonymous_access_and_no_default_password() -> None:
    env = environment(services()["grafana"])
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env
    # Compose refuses to start without it (`:?`): no admin/admin.
    assert env["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")


def test_prometheus_expands_the_runbook_base_from_the_environment() -> None:
    prometheus = services()["prometheus"]
    assert "--enable-feature=expand-external-labels" in prometheus["command"]
    assert environment(prometheus)["CLAIMSTREAM_RUNBOOK_BASE"].startswith(
        "${CLAIMSTREAM_RUNBOOK_BASE:?"
    )
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    assert config["global"]["external_labels"]["runbook_base"] == "${CLAIMSTREAM_RUNBOOK_BASE}"
