"""Worker settings: defaults, then a YAML settings file, then CLAIMSTREAM_* environment
variables; a CLAIMSTREAM_* variable that names no setting is reported at start, not ignored."""

from __future__ import annotations

import difflib
import logging
import os
import ssl
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from streams.core.keys.state import Limits
from streams.core.records.bounds import MAX_CLAIM_BYTES, RECORD_BYTES, reserve
from streams.core.records.errors import ClaimstreamError, validation_problems
from streams.packaged import example_path
from streams.topic_names import Topics

ENV_PREFIX = "CLAIMSTREAM_"
# Read by docker-compose.yml and scripts/kafka-assemble.sh (the broker kit), the build (mypyc's
# switch and module list) and the import switch to interpreted modules, never as a worker's
# setting: set in a worker's environment they are no mistyped setting.
DEPLOYMENT_VARIABLES = frozenset(
    {
        "CLAIMSTREAM_BIND_ADDRESS",
        "CLAIMSTREAM_RUNBOOK_BASE",
        "CLAIMSTREAM_POLICY_FILE",
        "CLAIMSTREAM_KAFKA_HOME",
        "CLAIMSTREAM_KAFKA_POM",
        "CLAIMSTREAM_KAFKA_VERSION",
        "CLAIMSTREAM_USE_MYPYC",
        "CLAIMSTREAM_MYPYC_MODULES",
        "CLAIMSTREAM_INTERPRETED",
    }
)

log = logging.getLogger(__name__)


class Guarantee(StrEnum):
    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE = "exactly_once"


class LogFormat(StrEnum):
    JSON = "json"  # one JSON object per line, for log collectors
    TEXT = "text"  # for people: `claimstream dev` defaults to it


class Connection(BaseModel):
    """The worker's name in the cluster, and how its clients reach the broker and the schema
    registry: the first settings of `Settings`."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    app_id: str = "claimstream"
    """the Faust app and its consumer group; names the arbiter's group (<app_id>-arbiter), the
    key-state changelog and the state folder under data_dir"""
    broker: str = "kafka://127.0.0.1:9092"
    """the bootstrap servers, comma-separated; host:9092 gets the kafka:// scheme"""
    security_protocol: str = "PLAINTEXT"
    """how every Kafka client connects: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"""
    sasl_mechanism: str | None = None
    """e.g. SCRAM-SHA-256: set, every Kafka client logs in with sasl_username and sasl_password"""
    sasl_username: str | None = None
    """the SASL user"""
    sasl_password: SecretStr | None = None
    """the SASL password: a secret, never printed"""
    ssl_cafile: Path | None = None
    """with SSL or SASL_SSL: the CA file that verifies the brokers (unset: the system's)"""
    ssl_certfile: Path | None = None
    """with SSL or SASL_SSL: the client certificate (mTLS)"""
    ssl_keyfile: Path | None = None
    """the client certificate's key (unset: in ssl_certfile)"""
    schema_registry: str | None = None
    """unset: the schemas packaged with claimstream (ids derived from their content, no server);
    else a Confluent-compatible registry's URL, without a password"""
    schema_registry_username: str | None = None
    """the registry's basic-auth user"""
    schema_registry_password: SecretStr | None = Field(
        default=None, description="the registry's basic-auth password: a secret, never printed"
    )

    @field_validator("schema_registry")
    @classmethod
    def _no_password_in_url(cls, url: str | None) -> str | None:
        """A URL is printed (errors, repr); a password belongs in a secret setting."""
        if url is not None and "://" in url and urlsplit(url).password is not None:
            raise ValueError(
                "the URL carries a password: set schema_registry_username and "
                "schema_registry_password (CLAIMSTREAM_SCHEMA_REGISTRY_PASSWORD, a secret) instead"
            )
        return url

    @field_validator("broker")
    @classmethod
    def _with_scheme(cls, broker: str) -> str:
        """`kafka:9092` and `kafka://kafka:9092` both work (Faust needs the scheme)."""
        return ",".join(
            part if "://" in part else f"kafka://{part}" for part in broker.strip().split(",")
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for SSL and SASL_SSL listeners, from the CA and client cert settings."""
        if self.security_protocol not in ("SSL", "SASL_SSL"):
            return None
        context = ssl.create_default_context(
            cafile=str(self.ssl_cafile) if self.ssl_cafile else None
        )
        if self.ssl_certfile:
            context.load_cert_chain(
                str(self.ssl_certfile), str(self.ssl_keyfile) if self.ssl_keyfile else None
            )
        return context

    @property
    def bootstrap(self) -> str:
        """host:port list without the kafka:// scheme, for plain aiokafka clients."""
        return ",".join(part.split("://", 1)[-1] for part in self.broker.split(","))


class Settings(Connection):
    """Every setting of a worker (see `load_settings` for where each is read from)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    policy: Path = Field(
        default_factory=lambda: example_path("policy.yaml"),
        description="the policy file (default: the packaged example policy)",
    )
    store: str = Field(
        default="memory://",
        description="memory:// keeps key state in memory (a restart reads the changelog in full); "
        "rocksdb:// on local disk under data_dir, with checkpoints (a restart reads its tail)",
    )
    store_cache_mb: int = Field(
        default=64,
        ge=1,
        description="with rocksdb://, the block cache the worker's task stores share (MiB)",
    )
    data_dir: Path = Path("var/claimstream")
    """where rocksdb:// keeps each task's store and checkpoint and Faust its tables"""
    web_host: str = "127.0.0.1"
    """where the web API, the console and /metrics bind, and the host the other workers are told to
    reach this one at (0.0.0.0 or ::: the machine's name)"""
    web_port: int = 6066
    """the web API's, console's and /metrics' port"""
    partitions: int = Field(default=8, ge=1)
    """the partition count of every topic the worker creates: input topics and changelogs share it
    """
    replication_factor: int = Field(default=1, ge=1)
    """replicas of every topic the worker creates"""
    min_insync_replicas: int = Field(
        default=1,
        ge=1,
        description="replicas that must hold a record before an acks=all write succeeds; "
        "2 with replication_factor 3 survives one broker lost without losing an acknowledged write",
    )
    processing_guarantee: Guarantee = Guarantee.AT_LEAST_ONCE
    """at_least_once (idempotent decisions) or exactly_once (Apache Kafka only: each task commits a
    batch's decisions, state and input offsets in one transaction)"""
    topics: Topics = Topics()
    """the topic names (see Topics)"""
    batch_size: int = Field(default=500, ge=1)
    """records a fetch returns at most; after a full fetch, one re-decision by time alone starts, no
    more"""
    batch_within_s: float = Field(default=0.01, gt=0)
    """the longest a fetch waits for records"""
    max_claims_per_key: int = Field(default=16, ge=2)
    """claims a key keeps; past it, those that no longer count are evicted first, and an evicted
    claim no longer counts"""
    max_record_bytes: int = Field(
        default=RECORD_BYTES,
        le=RECORD_BYTES,
        description="the largest record the worker sends, at most 1 MiB (its producers' request "
        "size): a key's kept claims are bounded in bytes so that its decisions and changelog "
        "record stay within it, and a dead letter that would pass it with its error headers "
        "carries the headers alone (claimstream.error.dropped says where the record is). At "
        "start the worker reads max.message.bytes of the decisions, escalations, dead-letter and "
        "changelog topics and refuses to start if one is smaller, saying how to raise it. It "
        "cannot be set below what the per-key bounds need (832,776 bytes at the defaults; each "
        "decision in decision_history_per_key and each statement in resolutions_per_key adds "
        "25-28 KB)",
    )
    decision_history_per_key: int = Field(default=10, ge=1)
    """the emitted decisions a key remembers (ids, outcomes, values), for its history and the belief
    as of an instant"""
    max_disputed_per_key: int = Field(default=64, ge=1)
    """claim ids refused as conflicting duplicates a key remembers, to refuse their later versions
    too; an id past it is forgotten"""
    resolutions_per_key: int = Field(
        default=10,
        ge=1,
        description="stewards' statements a key keeps for its audit trail: proposals waiting "
        "for review (at most half of them), then resolutions in force (the latest by "
        "decided_at, so the one that decides the key is always among them), then the latest "
        "reviews, undos and closed proposals",
    )
    state_cache_keys: int = Field(default=100_000, ge=1)
    """decoded key states a worker keeps in memory; others stay encoded (~1 KB), in memory or on
    disk as `store` says"""
    state_cache_mb: int = Field(
        default=48,
        ge=1,
        description="the decoded key states' memory, estimated from their claims, decisions, "
        "resolutions, disputed ids and last arbitration (MiB): a key of 10 claims and 10 "
        "decisions takes about 14 KB decoded, 15 KB with its arbitration; the least recently "
        "used leave first, by this bound or `state_cache_keys`",
    )
    retry_attempts: int = Field(default=3, ge=1)
    """attempts at a valid record whose processing fails, before it is dead-lettered
    processing_failed"""
    audit_retention_days: int = Field(
        default=30,
        ge=-1,
        description="the replay and audit horizon: days the input topics, dead letters and "
        "event topics keep every record (-1: forever); an existing topic that keeps less is "
        "warned of at start",
    )
    policy_lead_s: float = Field(
        default=10.0,
        ge=0,
        description="how long after `claimstream policy publish` a policy takes effect (without "
        "--in or --at): time for every worker to read it first, so that all move to it at the "
        "same instant",
    )
    policy_poll_s: float = Field(
        default=1.0,
        gt=0,
        description="how often a worker reads the policy and aliases topics for a newly "
        "published policy or alias",
    )
    expiry_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="how often, at most, the open-conflict and timer gauges are refreshed; "
        "despite the name it paces no expiry (expiry_ticks_per_batch bounds the re-decisions "
        "by time)",
    )
    commit_interval_s: float = Field(
        default=1.0,
        ge=0,
        description="at least once: how often, at most, the input offsets of the batches "
        "settled are committed (each commit is a write on the broker); a crash reads again "
        "what was read since, and every revocation or stop commits first",
    )
    expiry_ticks_per_batch: int = Field(
        default=64,
        ge=1,
        description="re-decisions by time alone (staleness, escalation) started per batch at "
        "most, and as many of the rollout sweep's (its own share: a twentieth of the loop while "
        "claims arrive, half when none do, none after a full fetch): one after a full fetch, "
        "else as many as a quarter of the time since the last ones affords at the measured cost "
        "of a record (half when no input came), so a wave of keys going stale together is "
        "spread instead of stalling claims",
    )
    instance_id: str | None = Field(
        default=None,
        description="static group membership (KIP-345): a name unique to this worker and stable "
        "across its restarts (the pod name on Kubernetes); a worker back within "
        "broker_session_timeout_s keeps its partitions without a rebalance. None: dynamic",
    )
    broker_session_timeout_s: float = Field(
        default=10.0,
        description="how long the group waits for a silent worker (a crash, or a static member "
        "restarting) before moving its partitions; with instance_id, size it above a restart",
    )
    broker_rebalance_timeout_s: float = 6.0
    """how long a rebalance waits for the members to join again (the arbiter's group and Faust's)"""
    principal_topic_prefix: str | None = Field(
        default=None,
        description="e.g. claims.from.: sources with a policy principal publish only on "
        "<prefix><principal>, a topic the broker's ACLs let only that principal write",
    )
    log_level: str = Field(
        default="info",
        description="crit, error, warn, info or debug: info shows what the runbook watches "
        "(tasks ready, changelog caught up, dead letters)",
    )
    log_format: LogFormat = LogFormat.JSON
    """json (one object per line, for log collectors) or text (for people; claimstream dev defaults
    to it)"""
    liveness_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="/healthz fails when the arbiter loop has not iterated for this long",
    )
    restore_timeout_s: float = Field(
        default=600.0, gt=0, description="/healthz fails when a rebalance restores for this long"
    )
    stall_threshold_s: float = Field(
        default=0.1,
        gt=0,
        description="an event loop held this long is a stall: what it ran is sampled and kept "
        "(GET /api/stalls, claimstream_loop_stalls_total)",
    )
    lag_interval_s: float = Field(
        default=5.0, gt=0, description="how often consumer lag is asked from the broker"
    )
    task_stall_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="a task that has not committed past its input for this long while records "
        "wait for it, or whose commits have failed for this long, fails /readyz (checked every "
        "lag_interval_s)",
    )
    steward_tokens: SecretStr | None = Field(
        default=None,
        description="comma-separated tokens that let a steward publish resolutions from the "
        "console, at least 16 characters each (name:token binds a token to the steward name): "
        "a secret, never printed; with neither this nor steward_tokens_file, the console's "
        "writes are off",
    )
    steward_tokens_file: Path | None = Field(
        default=None, description="a file of steward tokens, one per line (# comments)"
    )
    steward_signing_keys: str | None = Field(
        default=None,
        description="comma-separated steward:key_id:VARIABLE entries: the console signs what "
        "a steward's token writes with that key of the policy's stewards section, its secret "
        "(or base64 Ed25519 private key) read from the environment variable VARIABLE at start; "
        "needed where the stewards section requires signatures",
    )
    audit_signing_key: str | None = None
    """KEY_ID:VARIABLE: the Ed25519 key `claimstream audit export` signs its manifest with, its
    base64 raw private key read from the environment variable VARIABLE (`audit keygen`)"""
    audit_verify_keys: str | None = None
    """comma-separated KEY_ID:BASE64 raw Ed25519 public keys `audit verify` takes signatures of"""
    deployment_key: str | None = None
    """KEY_ID:VARIABLE: the AES-256 key that wraps each data subject's key for personal fields,
    its base64 read from the environment variable VARIABLE (`claimstream erase keygen`)"""
    subject_key_compaction_lag_hours: int = Field(default=24, ge=1)
    """the longest a destroyed subject key's wrapped copies stay on the compacted keys topic"""
    console_live_clients: int = Field(
        default=32, ge=1, description="live decision streams a worker serves at once"
    )

    @model_validator(mode="after")
    def _a_claim_fits_a_record(self) -> Settings:
        """A key must keep at least the largest claim the contract admits, beside the rest of
        its state at its bounds."""
        least = self.least_record_bytes()
        if self.max_record_bytes < least:
            raise ValueError(
                f"max_record_bytes={self.max_record_bytes:,} cannot hold a key's largest "
                f"claim ({MAX_CLAIM_BYTES:,} bytes) beside the rest of its state at these "
                f"per-key bounds ({self._reserve():,} bytes): raise it to {least:,} or lower "
                "resolutions_per_key, decision_history_per_key or max_disputed_per_key"
            )
        return self

    def least_record_bytes(self) -> int:
        """The smallest `max_record_bytes` these per-key bounds allow: the largest claim the
        contract admits beside the rest of a key's state at its bounds."""
        return MAX_CLAIM_BYTES + self._reserve()

    def _reserve(self) -> int:
        return reserve(
            self.max_claims_per_key,
            self.decision_history_per_key,
            self.max_disputed_per_key,
            self.resolutions_per_key,
        )

    @model_validator(mode="after")
    def _insync_within_replicas(self) -> Settings:
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(
                f"min_insync_replicas={self.min_insync_replicas} exceeds "
                f"replication_factor={self.replication_factor}: no write could succeed"
            )
        return self

    @field_validator("audit_retention_days")
    @classmethod
    def _a_horizon(cls, days: int) -> int:
        if days == 0:
            raise ValueError("0 keeps nothing: a number of days, or -1 for forever")
        return days

    def key_limits(self) -> Limits:
        """What a key's state keeps, at most (`max_claims_per_key` and the rest)."""
        return Limits(
            self.max_claims_per_key,
            self.decision_history_per_key,
            self.max_disputed_per_key,
            max_resolutions=self.resolutions_per_key,
            max_claim_bytes=self.max_record_bytes - self._reserve(),
        )

    @property
    def changelog_topic(self) -> str:
        """The compacted topic that journals the arbiter's per-key state."""
        return f"{self.app_id}-key-state-changelog"


def load_settings(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    file = path or (Path(env[f"{ENV_PREFIX}SETTINGS"]) if f"{ENV_PREFIX}SETTINGS" in env else None)
    if file is not None:
        try:
            loaded = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ClaimstreamError(f"{file}: cannot read settings: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ClaimstreamError(f"{file}: settings must be a mapping")
        data.update(loaded)
    topics = dict(data.pop("topics", {}) or {})
    for name in Settings.model_fields:
        if name == "topics":
            continue
        value = env.get(ENV_PREFIX + name.upper())
        if value is not None:
            data[name] = value
    for name in Topics.model_fields:
        value = env.get(f"{ENV_PREFIX}TOPIC_{name.upper()}")
        if value is not None:
            topics[name] = value
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings.model_validate({**data, "topics": topics})
    except ValidationError as exc:
        raise ClaimstreamError(validation_problems(exc.errors(), "settings")) from exc


def setting_variables() -> frozenset[str]:
    """Every CLAIMSTREAM_* variable `load_settings` reads."""
    settings = {ENV_PREFIX + name.upper() for name in Settings.model_fields if name != "topics"}
    topics = {f"{ENV_PREFIX}TOPIC_{name.upper()}" for name in Topics.model_fields}
    return frozenset({f"{ENV_PREFIX}SETTINGS", *settings, *topics})


def unknown_variables(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The CLAIMSTREAM_* variables that name no setting, each with the closest one that does."""
    known = setting_variables()
    return [
        (name, difflib.get_close_matches(name, known, n=1, cutoff=0)[0])
        for name in sorted(env)
        if name.startswith(ENV_PREFIX) and name not in known | DEPLOYMENT_VARIABLES
    ]


def warn_unknown_variables(env: Mapping[str, str] | None = None) -> None:
    """A mistyped setting would be silently ignored: name it, never its value (it may be a
    secret), and the setting it was probably meant to be."""
    for name, closest in unknown_variables(os.environ if env is None else env):
        log.warning(
            "%s is not a setting and is ignored; the closest setting is %s",
            name,
            closest,
            extra={"variable": name, "closest": closest},
        )
