"""A broker as a local process: free ports, the data dir's lifecycle, spawn, readiness, stop.

`BrokerProcess` is what every kind shares (spawn in its own session, wait until the probe says
it serves, SIGTERM then SIGKILL only our own PID); `kafka` and `tansu` say what to run.
`DataDirLifecycle` gives them and the `cluster` `close()` and the context manager.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from streams.devkit.brokers.probe import metadata_ready

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


def write_private(path: Path, text: str) -> None:
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


class DataDirLifecycle:
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


class BrokerProcess(DataDirLifecycle):
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
