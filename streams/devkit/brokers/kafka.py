"""Apache Kafka, single node: KRaft mode from the jars `scripts/kafka-assemble.sh` resolves.

The server, SASL and ACL property templates, the jar assembly (`assemble_kafka`), and
`KafkaBroker`: its config and storage format before spawning, its SCRAM credentials and
`allow()` for ACLs. A `cluster` is several of these sharing one quorum.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path

from streams.devkit.brokers.probe import SCRAM_MECHANISM, acl_visible, metadata_ready
from streams.devkit.brokers.process import BrokerProcess, free_port, write_private

# scripts/kafka-assemble.sh and deploy/kafka/pom.xml, shipped with the dev kit.
KAFKA_ASSEMBLY = files("streams.devkit") / "kafka"

_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
listeners={listener}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners={listener}://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name={listener}
listener.security.protocol.map={listener}:{listener},CONTROLLER:{controller_protocol}
log.dirs={dir}
num.partitions={n}
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
# the first group join / transactional producer creates all of these; 50 is slow on 2 cores
offsets.topic.num.partitions=8
transaction.state.log.num.partitions=8
group.initial.rebalance.delay.ms=0
# compacted changelog topics (Faust tables) rely on the cleaner
log.cleaner.enable=true
# after kill() the dead broker's registration blocks the new one until its session expires
# (default 9 s); 4 s still tolerates GC pauses on a busy 2-core box
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000
"""

_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
"""

SASL_PROTOCOL = "SASL_PLAINTEXT"
ADMIN_USER = "admin"

# (A backslash at a line end joins the Python string: the properties are one line each.)
# Appended when the client listener is secured. The credentials themselves were written into the
# metadata log by the storage format (--add-scram); only the broker's own login is configured here.
_SASL_PROPERTIES = """\
sasl.enabled.mechanisms=SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required \
username="{admin}" password="{password}";
"""

# The controller authorizes the broker's own registration too. Over a PLAINTEXT controller listener
# the broker is User:ANONYMOUS, which would then have to be a super user, and anyone reaching the
# controller port could grant themselves ACLs. SCRAM cannot be used there (its credentials live in
# the metadata the controller serves), so with ACLs that listener takes SASL/PLAIN with a static
# credential for admin alone.
_ACL_PROPERTIES = """\
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:{admin}
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required \
username="{admin}" password="{password}" user_{admin}="{password}";
"""

# kafka.admin.AclCommand's client (the admin super user).
_ADMIN_CLIENT_PROPERTIES = """\
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-256
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
username="{admin}" password="{password}";
"""

_TOOL_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

# Names and passwords end up inside --add-scram's [name=...,password=...] and JAAS "..." strings;
# this alphabet needs no quoting in either (secrets.token_urlsafe fits it).
_SAFE_CREDENTIAL = re.compile(r"^[A-Za-z0-9._~-]+$")
_TOPIC_NAME = re.compile(r"^(?:[A-Za-z0-9._-]{1,249}|\*)$")

# Operations, keyed by lower-case name without separators, in AclCommand's spelling (the
# probe's `ACL_OPERATION_CODES` has their wire codes).
ACL_OPERATIONS = {
    "read": "Read",
    "write": "Write",
    "create": "Create",
    "delete": "Delete",
    "alter": "Alter",
    "describe": "Describe",
    "describeconfigs": "DescribeConfigs",
    "alterconfigs": "AlterConfigs",
    "all": "All",
}
ACL_TIMEOUT_S = 15.0


def assemble_kafka() -> Path:
    """Run scripts/kafka-assemble.sh (a no-op once the jar cache is complete); return libs dir."""
    cmd = ["bash", str(KAFKA_ASSEMBLY / "kafka-assemble.sh")]
    env = {**os.environ, "CLAIMSTREAM_KAFKA_POM": str(KAFKA_ASSEMBLY / "pom.xml")}
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"kafka-assemble.sh failed (exit {e.returncode}):\n{e.stderr}") from e
    return Path(out.stdout.strip().splitlines()[-1])


class KafkaBroker(BrokerProcess):
    """Single-node Apache Kafka in KRaft mode (broker and controller in one JVM), data on disk.

    ``log.dirs`` is ``data_dir/kraft`` rather than ``data_dir`` itself, so the config and log
    files written next to it never sit inside Kafka's storage directory.

    Security: with ``scram_users`` and/or ``acls=True`` the client
    listener is SASL_PLAINTEXT with SCRAM-SHA-256, so a producer's principal (``User:<name>``) is
    proven by a password rather than claimed. An ``admin`` user with a random password is always
    added (``admin_password``); the readiness probe and ``allow()`` log in as it. With ``acls=True``
    the StandardAuthorizer denies anything no ACL allows and ``admin`` is the only super user.
    Users are created when the storage is formatted (first start): later changes to
    ``scram_users`` do not reach an existing data dir.
    """

    kind = "kafka"

    def __init__(
        self,
        data_dir: Path | None = None,
        port: int | None = None,
        partitions: int = 4,
        extra_config: dict[str, str] | None = None,
        heap: str = "512m",
        scram_users: dict[str, str] | None = None,
        acls: bool = False,
        node_id: int = 1,
        voters: str | None = None,
        cluster_id: str | None = None,
    ) -> None:
        users = dict(scram_users or {})
        for name, password in users.items():
            if not _SAFE_CREDENTIAL.match(name) or not _SAFE_CREDENTIAL.match(password):
                raise ValueError(
                    f"SCRAM user {name!r}: names and passwords may only use A-Z a-z 0-9 . _ ~ -"
                )
        if ADMIN_USER in users:
            raise ValueError(f"{ADMIN_USER!r} is reserved for the broker's own super user")
        super().__init__(data_dir, port, partitions)
        self.controller_port: int | None = None
        self.node_id = node_id
        self.voters = voters  # None: this node alone is the quorum
        self.cluster_id = cluster_id
        self.extra_config = dict(extra_config or {})
        self.heap = heap
        self.scram_users = users
        self.acls = acls
        self.secured = scram_users is not None or acls
        self.admin_user = ADMIN_USER
        self.admin_password: str | None = secrets.token_urlsafe(24) if self.secured else None
        self._libs: Path | None = None

    @property
    def storage_dir(self) -> Path:
        return self.data_dir / "kraft"

    @property
    def security_protocol(self) -> str:
        return SASL_PROTOCOL if self.secured else "PLAINTEXT"

    def _admin_credentials(self) -> tuple[str, str]:
        if self.admin_password is None:
            raise RuntimeError("this broker was started without scram_users or acls: no SASL")
        return self.admin_user, self.admin_password

    def client_security(self, user: str = ADMIN_USER) -> dict[str, str]:
        """aiokafka keyword arguments (producer, consumer, admin) to log in as `user`."""
        admin, admin_password = self._admin_credentials()
        password = admin_password if user == admin else self.scram_users.get(user)
        if password is None:
            known = sorted([admin, *self.scram_users])
            raise ValueError(f"no SCRAM user {user!r} on this broker; known users: {known}")
        return {
            "security_protocol": SASL_PROTOCOL,
            "sasl_mechanism": SCRAM_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }

    def allow(
        self,
        principal: str,
        operation: str | Sequence[str],
        topic: str | Sequence[str] = (),
        *,
        groups: Sequence[str] = (),
    ) -> None:
        """Add ALLOW ACLs for `principal` (``alice`` or ``User:alice``): every `operation` on
        every literal topic name (``*`` for every topic) and consumer group in `groups`; return
        once the broker enforces them all.

        aiokafka's admin client has no ACL calls (0.14), so Kafka's own AclCommand runs from the
        assembled jars as the admin super user; a JVM start costs about a second, hence one call
        for many operations and resources.
        """
        if not self.acls:
            raise RuntimeError("allow() needs a broker started with acls=True")
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("allow() needs a running broker")
        name = principal.removeprefix("User:")
        if not _SAFE_CREDENTIAL.match(name):
            raise ValueError(f"principal {principal!r}: expected User:<name> or <name>")
        operations = [operation] if isinstance(operation, str) else list(operation)
        op_keys = [op.replace("_", "").replace("-", "").lower() for op in operations]
        for op, op_key in zip(operations, op_keys, strict=True):
            if op_key not in ACL_OPERATIONS:
                raise ValueError(
                    f"operation {op!r}: expected one of {sorted(ACL_OPERATIONS.values())}"
                )
        topics = [topic] if isinstance(topic, str) else list(topic)
        for resource_name in [*topics, *groups]:
            if not _TOPIC_NAME.match(resource_name):
                raise ValueError(f"topic or group {resource_name!r} is not a valid Kafka name")
        resources = [("topic", t) for t in topics] + [("group", g) for g in groups]
        if not resources or not op_keys:
            raise ValueError("allow() needs an operation and a topic or group")
        principal = f"User:{name}"
        self._acl_command(
            "--add",
            *("--allow-principal", principal),
            *(arg for op_key in op_keys for arg in ("--operation", ACL_OPERATIONS[op_key])),
            *(arg for kind, resource_name in resources for arg in (f"--{kind}", resource_name)),
        )
        deadline = time.monotonic() + ACL_TIMEOUT_S
        creds = self._admin_credentials()
        for op_key in op_keys:
            for resource in resources:
                while not acl_visible(self.port, creds, principal, op_key, resource):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"ACL {principal} {op_key} {resource} not visible")
                    time.sleep(0.05)

    def _acl_command(self, *args: str) -> None:
        client_config = self.data_dir / "admin-client.properties"
        tool = [
            *self._java(
                heap=["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"],
                log4j=self.data_dir / "tools-log4j.properties",
            ),
            "kafka.admin.AclCommand",
            *("--bootstrap-server", self.bootstrap, "--command-config", str(client_config)),
            *args,
        ]
        admin_log = self.data_dir / "admin.log"
        with admin_log.open("ab") as log:
            log.write(f"\n=== AclCommand {' '.join(args)} ===\n".encode())
            log.flush()
            res = subprocess.run(
                tool, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=120
            )
        if res.returncode != 0:
            tail = admin_log.read_text(errors="replace").splitlines()[-20:]
            msg = f"AclCommand failed (exit {res.returncode}): {' '.join(args)}"
            raise RuntimeError(msg + "\n" + "\n".join(tail))

    def _ready(self) -> bool:
        sasl = self._admin_credentials() if self.secured else None
        return metadata_ready(self.port, sasl=sasl, node_id=self.node_id)

    def _properties(self) -> str:
        assert self.controller_port is not None
        listener = self.security_protocol
        props = _SERVER_PROPERTIES.format(
            port=self.port,
            cport=self.controller_port,
            node_id=self.node_id,
            voters=self.voters or f"{self.node_id}@127.0.0.1:{self.controller_port}",
            dir=self.storage_dir,
            n=self.partitions,
            listener=listener,
            controller_protocol=SASL_PROTOCOL if self.acls else "PLAINTEXT",
        )
        if self.secured:
            admin, password = self._admin_credentials()
            props += _SASL_PROPERTIES.format(admin=admin, password=password)
            if self.acls:
                props += _ACL_PROPERTIES.format(admin=admin, password=password)
        # java.util.Properties keeps the last value of a repeated key, so extras override.
        return props + "".join(f"{k}={v}\n" for k, v in self.extra_config.items())

    def _load_or_save_admin_password(self) -> None:
        """Keep the admin password with the data: after a restart (or a new KafkaBroker on the
        same data dir) the SCRAM credential in the metadata log is still the first one."""
        secret_path = self.data_dir / "admin.secret"
        formatted = (self.storage_dir / "meta.properties").exists()
        if formatted and secret_path.exists():
            self.admin_password = secret_path.read_text().strip()
        elif formatted:
            raise RuntimeError(
                f"{self.storage_dir} was formatted without SCRAM credentials; "
                "a secured broker needs a fresh data_dir"
            )
        else:
            write_private(secret_path, f"{self.admin_password}\n")

    def _prepare(self) -> None:
        if self._libs is None:
            self._libs = assemble_kafka()
        if self.controller_port is None:  # keep it across restarts: the quorum voter set names it
            self.controller_port = free_port()
        if self.secured:
            self._load_or_save_admin_password()
            admin, password = self._admin_credentials()
            client = _ADMIN_CLIENT_PROPERTIES.format(admin=admin, password=password)
            write_private(self.data_dir / "admin-client.properties", client)
            (self.data_dir / "tools-log4j.properties").write_text(_TOOL_LOG4J)
        props_path = str(self.data_dir / "server.properties")
        write_private(Path(props_path), self._properties())  # may hold passwords
        (self.data_dir / "log4j.properties").write_text(_LOG4J)
        if (self.storage_dir / "meta.properties").exists():
            return  # formatted by an earlier start: keep its cluster id and data
        cluster_id = self.cluster_id or new_cluster_id()
        # Kafka 3.9 syntax; a static controller.quorum.voters needs no --standalone.
        # `=`: a base64url id may start with "-", which the tool would read as an option.
        fmt = ["format", "--ignore-formatted", f"--cluster-id={cluster_id}", "-c", props_path]
        if self.secured:
            # KRaft keeps SCRAM credentials in the metadata log; writing them at format time means
            # the broker can authenticate its first client (and itself) without a bootstrap step.
            admin, password = self._admin_credentials()
            for name, secret in {admin: password, **self.scram_users}.items():
                fmt += ["--add-scram", f"{SCRAM_MECHANISM}=[name={name},password={secret}]"]
        with self.log_path.open("ab") as log:
            res = subprocess.run(
                [*self._java(), "kafka.tools.StorageTool", *fmt],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if res.returncode != 0:
            msg = f"kafka storage format failed (exit {res.returncode})"
            raise RuntimeError(f"{msg}\n{self._log_tail()}")

    def _java(self, heap: list[str] | None = None, log4j: Path | None = None) -> list[str]:
        assert self._libs is not None
        java = shutil.which("java") or "java"
        log4j_flag = f"-Dlog4j.configuration=file:{log4j or self.data_dir / 'log4j.properties'}"
        if heap is None:
            heap = [f"-Xmx{self.heap}", "-Xms128m", "-XX:+ExitOnOutOfMemoryError"]
        return [java, *heap, "-Djava.awt.headless=true", log4j_flag, "-cp", f"{self._libs}/*"]

    def _command(self) -> list[str]:
        return [*self._java(), "kafka.Kafka", str(self.data_dir / "server.properties")]


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
