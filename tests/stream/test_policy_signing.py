"""Who may roll a policy out: where the policy in force asks for stewards' signatures, a policy
published unsigned is passed over (logged, never applied) and the same policy signed by a steward
key takes effect, on a real worker and Apache Kafka."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from streams.devkit.brokers import KafkaBroker
from tests.stream.support import REPO, Deployment, WorkerProcess

SECRET = "a-steward-secret-long-enough-for-hmac-sha256"


def _stewarded(path: Path, version: str) -> Path:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["version"] = version
    policy["stewards"] = {
        "required": True,
        "keys": [
            {"key_id": "ann-1", "algorithm": "hmac-sha256", "secret_env": "ANN_KEY",
             "sources": ["ann"]},
        ],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(policy))
    return path


def _publish(deployment: Deployment, policy: Path, *signing: str) -> None:
    env = {
        **os.environ,
        "CLAIMSTREAM_TOPIC_POLICIES": deployment.topics.policies,
        "CLAIMSTREAM_POLICY": str(deployment.policy),
        "ANN_KEY": SECRET,
    }
    command = [sys.executable, "-m", "streams.cli", "policy", "publish", str(policy)]
    done = subprocess.run(
        [*command, "--in", "1s", "--broker", deployment.bootstrap, *signing],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _version(worker: WorkerProcess) -> str:
    return str(worker.get("/healthz")["policy_version"])


def test_only_a_stewards_signed_policy_is_rolled_out(kafka: KafkaBroker, tmp_path: Path) -> None:
    deployment = Deployment(
        bootstrap=kafka.bootstrap,
        workdir=tmp_path / "worker",
        policy=_stewarded(tmp_path / "a.yaml", "A"),
        settings={"policy_poll_s": "0.2"},
    )
    worker = deployment.worker(0, ANN_KEY=SECRET)
    policy_b = _stewarded(tmp_path / "b.yaml", "B")
    try:
        worker.start()
        assert _version(worker) == "A"
        _publish(deployment, policy_b)  # unsigned
        deadline = time.monotonic() + 30
        while "passed over, not applied" not in worker.log_tail(200):
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.3)
        assert "unauthenticated" in worker.log_tail(200) or "sign" in worker.log_tail(200)
        time.sleep(2.0)  # past the instant it named
        assert _version(worker) == "A"
        _publish(deployment, policy_b, "--by", "ann", "--key-id", "ann-1")
        deadline = time.monotonic() + 30
        while _version(worker) != "B":
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.3)
    finally:
        worker.stop()
    assert "Traceback" not in worker.log_tail(400), worker.log_tail()
