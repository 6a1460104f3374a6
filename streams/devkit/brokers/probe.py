"""The raw-socket readiness probe: whether a broker serves, spoken in Kafka's wire protocol.

`metadata_ready` sends a Metadata v4 request (first logging in with SCRAM-SHA-256 on a secured
listener); `acl_visible` asks DescribeAcls whether an ACL already holds. Written by hand
so the probe needs no Kafka client library and runs inside or outside an event loop. Used by
the broker processes (`process`, `kafka`) while they start and grant ACLs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
import struct

SCRAM_MECHANISM = "SCRAM-SHA-256"
_PROBE_CLIENT = "claimstream-probe"

# org.apache.kafka.common.acl.AclOperation's wire codes, which the DescribeAcls probe filters on,
# keyed like `kafka.ACL_OPERATIONS` (lower-case, no separators).
ACL_OPERATION_CODES = {
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
# ResourceType wire codes of the resources `kafka.KafkaBroker.allow` grants on.
ACL_RESOURCE_CODES = {"topic": 2, "group": 3}
_ACL_PATTERN_LITERAL = 3
_ACL_PERMISSION_ALLOW = 3


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


def acl_visible(
    port: int,
    sasl: tuple[str, str],
    principal: str,
    operation: str,
    resource: tuple[str, str],
) -> bool:
    """Whether the broker's authorizer already holds an ALLOW ACL (DescribeAcls v1).

    CreateAcls returns once the controller committed the ACL; the broker applies it when it
    replays the metadata log a moment later. Asking the broker closes that gap for callers that
    produce right after `allow()`. `resource`: (type, literal name), e.g. ("group", "app").
    """
    kind, name = resource
    body = (
        struct.pack(">b", ACL_RESOURCE_CODES[kind])
        + _kafka_string(name)
        + struct.pack(">b", _ACL_PATTERN_LITERAL)
        + _kafka_string(principal)
        + _kafka_string("*")
        + struct.pack(">bb", ACL_OPERATION_CODES[operation.lower()], _ACL_PERMISSION_ALLOW)
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
