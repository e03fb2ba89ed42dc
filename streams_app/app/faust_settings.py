"""Faust's ``App`` settings, on streams_app: each one honoured, mapped to ours, or accepted with a
one-line warning that says why it has no effect here.

A Faust app passes its settings to ``App(...)`` unchanged. :func:`translate` sorts them:

- **mapped**: a Faust name for one of our settings (``broker_commit_interval`` is our
  ``commit_interval``), converted where the unit differs;
- **honoured**: Faust settings streams_app implements with Faust's meaning
  (``key_serializer``, ``value_serializer``, ``reply_to``, ``timezone``, ``version`` ...), kept as
  fields of :class:`AppSettings`;
- **no effect**: accepted, and one warning per setting and process names the reason
  (``stream_buffer_maxsize``: the worker fetches ``max_poll_records`` per batch instead).

A name that is neither ours nor Faust's is an error, as it is for ``app.conf.x = ...``.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import difflib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from streams_app.codecs import named_codec
from streams_app.errors import ConfigError
from streams_app.settings import EXACTLY_ONCE_V2, Settings

log = logging.getLogger(__name__)


@dataclass(repr=False)  # Settings' repr, which masks secrets
class AppSettings(Settings):
    """Our settings plus the Faust settings streams_app honours with Faust's meaning."""

    #: Serializer of topic keys that name none (Faust's default: raw bytes / UTF-8 text).
    key_serializer: str = "raw"
    #: Serializer of topic values that name none (Faust's default: JSON).
    value_serializer: str = "json"
    #: Faust's app version: above 1 the app id becomes ``id_format`` (``{id}-v{version}``),
    #: which names the consumer group and every internal topic, as in Faust.
    version: int = 1
    id_format: str = "{id}-v{version}"
    #: The topic agent replies come back on (RPC: ``ask``/``map``/``join``); default
    #: ``reply_to_prefix`` plus a per-process id.
    reply_to: str | None = None
    reply_to_prefix: str = "f-reply-"
    reply_create_topic: bool = False
    #: Retention of reply topics, seconds.
    reply_expires: float = 86400.0
    #: Timezone of ``@app.crontab`` schedules that give none (a ``tzinfo`` or an IANA name).
    timezone: Any = datetime.UTC
    #: Where a consumer group with no committed offset starts: earliest or latest.
    consumer_auto_offset_reset: str = "earliest"
    #: Faust's leader election topic off: ``on_leader`` timers then run nowhere.
    topic_disable_leader: bool = False
    #: Topics that do not exist are created (off: a missing topic stops the worker).
    topic_allow_declare: bool = True
    #: Faust settings accepted without effect, as given (for ``app.conf.<name>`` reads).
    faust: dict[str, Any] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        """Ours, then the Faust settings honoured here: a wrong one stops the worker at start
        like any other setting."""
        super().validate()
        for name in ("key_serializer", "value_serializer"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    named_codec(value)
                except ValueError:
                    raise ConfigError(
                        name, f"{value!r} is not a serializer", "use 'raw', 'json' or 'str'"
                    ) from None
            elif not callable(getattr(value, "dumps", None)):
                raise ConfigError(name, f"{value!r} is not a serializer", "use 'raw' or 'json'")
        if type(self.version) is not int or self.version < 1:
            raise ConfigError("version", f"{self.version!r} is not a version", "use 1, 2, ...")
        if self.consumer_auto_offset_reset not in ("earliest", "latest"):
            raise ConfigError(
                "consumer_auto_offset_reset",
                f"{self.consumer_auto_offset_reset!r} is not a reset policy",
                "use 'earliest' or 'latest'",
            )
        expires = self.reply_expires
        if isinstance(expires, bool) or not isinstance(expires, (int, float)) or expires <= 0:
            raise ConfigError(
                "reply_expires",
                f"{expires!r} is not a positive duration",
                "use seconds, e.g. 86400",
            )

    def __setattr__(self, name: str, value: Any) -> None:
        fields = _field_names(type(self))
        if name in fields or name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        ours = translate({name: value}, where="app.conf")
        if ours:
            for key, mapped in ours.items():
                object.__setattr__(self, key, mapped)
            return
        self.faust[name] = value

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not attributes: Faust settings without effect.
        if name.startswith("_") or name == "faust":
            raise AttributeError(name)
        faust = self.__dict__.get("faust", {})
        if name in faust:
            return faust[name]
        if name in NO_EFFECT:
            return None
        raise AttributeError(f"{name!r} is neither a streams_app nor a Faust setting")

    @property
    def name(self) -> str:
        """Faust's ``conf.name``: the id as given, before ``version`` was applied."""
        return str(self.faust.get("_name", self.id))


def _field_names(cls: type) -> frozenset[str]:
    cached: frozenset[str] | None = cls.__dict__.get("_FIELD_NAMES")
    if cached is None:
        cached = frozenset(f.name for f in dataclasses.fields(cls))
        cls._FIELD_NAMES = cached  # type: ignore[attr-defined]
    return cached


# -- the table -------------------------------------------------------------------------------


def _seconds_to_ms(value: Any) -> int:
    return int(float(_seconds(value)) * 1000)


def _seconds(value: Any) -> float:
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return float(value)


def _guarantee(value: Any) -> str:
    text = str(getattr(value, "value", value))
    if text in ("exactly_once", EXACTLY_ONCE_V2):
        return EXACTLY_ONCE_V2
    return text


def _broker(value: Any) -> str:
    """Faust's broker forms: a URL, ``;``/``,``-separated URLs, a list, ``aiokafka://``,
    a URL without a port (9092). An empty setting stays empty (our validation names it)."""
    if isinstance(value, str) and not value.strip():
        return value
    items = value if isinstance(value, (list, tuple)) else str(value).replace(";", ",").split(",")
    servers = []
    for item in items:
        text = str(item).strip()
        for scheme in ("kafka://", "aiokafka://", "confluent://"):
            if text.startswith(scheme):
                text = text[len(scheme) :]
        text = text.rstrip("/")
        if not text:
            text = "localhost"
        if ":" not in text.rsplit("]", 1)[-1]:
            text += ":9092"
        servers.append(text)
    return ",".join(servers)


def _store(value: Any) -> str:
    text = str(value)
    if text.startswith(("rocksdb:", "rocksdict:")):
        return "rocksdb://"
    if text.startswith("memory:"):
        return "memory://"
    raise ConfigError(
        "store",
        f"{text!r} is not a store streams_app has",
        "use 'rocksdb://' (RocksDB, the default) or 'memory://'",
    )


#: Faust name -> (our name, conversion).
MAPPED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "broker": ("broker", _broker),
    "url": ("broker", _broker),
    "broker_commit_interval": ("commit_interval", _seconds),
    "broker_commit_every": ("commit_every", int),
    "broker_session_timeout": ("session_timeout", _seconds),
    "broker_heartbeat_interval": ("heartbeat_interval", _seconds),
    "consumer_group_instance_id": ("group_instance_id", lambda v: v),
    "broker_max_poll_interval": ("max_poll_interval", _seconds),
    "broker_max_poll_records": ("max_poll_records", int),
    "producer_linger_ms": ("producer_linger_ms", int),
    "producer_linger": ("producer_linger_ms", _seconds_to_ms),
    "producer_max_batch_size": ("producer_max_batch_size", int),
    "producer_compression_type": ("compression_type", lambda v: v),
    "processing_guarantee": ("processing_guarantee", _guarantee),
    "store": ("store", _store),
    "datadir": ("state_dir", lambda v: v),
}

_WEB = "the worker's web server is aiohttp on web_bind:web_port, with its own views and options"
_CLASSES = "streams_app does not take replacement classes; its own runtime runs the app"

#: Faust settings streams_app accepts and does not act on, with the reason.
NO_EFFECT: dict[str, str] = {
    "origin": "the app is imported from -A or the script that calls app.main()",
    "autodiscover": "agents, tables and timers register when their module is imported (-A)",
    "tabledir": "tables live in state_dir/<app id>",
    "debug": "no debug mode (use -l debug)",
    "blocking_timeout": "no blocking detector",
    "cython_optimizations": "no Cython extensions",
    "env_prefix": "environment variables are STREAMS_APP_<NAME>",
    "logging_config": "logging is configured by the CLI (-l) or by your program",
    "loghandlers": "logging is configured by the CLI (-l) or by your program",
    "worker_redirect_stdouts": "print() goes to stdout, unchanged",
    "worker_redirect_stdouts_level": "print() goes to stdout, unchanged",
    "agent_supervisor": "an agent error follows error_policy (abort, then retry/stop/dlq)",
    "broker_api_version": "the client negotiates API versions with the broker",
    "consumer_api_version": "the client negotiates API versions with the broker",
    "producer_api_version": "the client negotiates API versions with the broker",
    "broker_check_crcs": "the client always checks CRCs",
    "broker_client_id": "client ids are <app id>-consumer/-producer",
    "broker_commit_livelock_soft_timeout": "commits happen every commit_interval or abort",
    "broker_rebalance_timeout": "the rebalance timeout is max_poll_interval",
    "broker_request_timeout": "the client's request timeout is used",
    "broker_consumer": "one broker list for everything: set broker",
    "broker_producer": "one broker list for everything: set broker",
    "broker_credentials": "use security_protocol, sasl_* and ssl_* settings",
    "ssl_context": "use the ssl_cafile, ssl_certfile and ssl_keyfile settings",
    "consumer_max_fetch_size": "the client's fetch size is used",
    "consumer_metadata_max_age_ms": "the client's metadata refresh is used",
    "consumer_connections_max_idle_ms": "the client's idle timeout is used",
    "producer_acks": "acks follow processing_guarantee (all under exactly-once)",
    "producer_max_request_size": "the client's request size limit is used",
    "producer_request_timeout": "the client's request timeout is used",
    "producer_connections_max_idle_ms": "the client's idle timeout is used",
    "producer_metadata_max_age_ms": "the client's metadata refresh is used",
    "producer_partitioner": "keys are partitioned by murmur2, as Kafka's default",
    "producer_threaded": "one producer per worker, in the worker's event loop",
    "recovery_consistency_check": "restore always reads changelogs to their end, committed",
    "store_check_exists": "stores are opened or created at start",
    "stream_ack_cancelled_tasks": "offsets commit with the outputs, in one transaction",
    "stream_ack_exceptions": "an agent error follows error_policy; nothing is acked past it",
    "stream_buffer_maxsize": "the worker fetches max_poll_records per batch",
    "stream_processing_timeout": "no per-record processing timeout",
    "stream_publish_on_commit": "sends join the transaction and publish at commit anyway",
    "stream_recovery_delay": "processing starts once tables are restored",
    "stream_wait_empty": "a commit always waits for every handed-out record",
    "table_cleanup_interval": "windowed tables expire windows as stream time advances",
    "table_key_index_size": "no key index: tables are per-partition RocksDB stores",
    "cache": "no cache backend",
    "canonical_url": _WEB,
    "web": _WEB,
    "web_application_options": _WEB,
    "web_cors_options": _WEB,
    "web_in_thread": _WEB,
    "web_ssl_context": _WEB,
    "web_transport": _WEB,
    "web_graph_enabled": _WEB,
    "web_metrics_enabled": _WEB,
    "web_router_enabled": _WEB,
    "web_stats_enabled": _WEB,
    "web_tables_enabled": _WEB,
    "aerospike_retries_on_exception": "no Aerospike store",
    "aerospike_sleep_seconds_between_retries_on_exception": "no Aerospike store",
    "crash_app_on_aerospike_exception": "no Aerospike store",
    "timezone_": "",
}
for _cls in (
    "Agent",
    "ConsumerScheduler",
    "Event",
    "GlobalTable",
    "HttpClient",
    "LeaderAssignor",
    "Monitor",
    "PartitionAssignor",
    "Router",
    "Schema",
    "Serializers",
    "SetGlobalTable",
    "SetTable",
    "Stream",
    "Table",
    "TableManager",
    "Topic",
    "Worker",
):
    NO_EFFECT[_cls] = _CLASSES
del NO_EFFECT["timezone_"]

_warned: set[str] = set()
#: Warnings made while logging was not set up yet, for :func:`release_warnings`.
_held: list[str] = []


def _warn_once(name: str, reason: str) -> None:
    """One warning per setting and process, in the log.

    ``python app.py worker`` makes the App when the module runs, before ``app.main()`` reads
    the command line and sets logging up: logged then, the warning would reach stderr bare,
    through Python's last-resort handler, and read like a line the app printed. It is held
    instead, and the command line logs it once logging is set up (:func:`release_warnings`);
    whatever is still held when the process exits is logged then, as it would have been."""
    if name in _warned:
        return
    _warned.add(name)
    message = f"Faust setting {name!r} has no effect on streams_app: {reason}"
    if log.hasHandlers():
        log.warning("%s", message)
        return
    if not _held:
        atexit.register(release_warnings)
    _held.append(message)


def release_warnings() -> None:
    """Log the warnings held until logging was set up (see :func:`_warn_once`)."""
    held = list(_held)
    _held.clear()
    for message in held:
        log.warning("%s", message)


def _ours_already(name: str, value: Any) -> bool:
    """A setting named as ours in a form that is not Faust's alone: validated as it is (so a
    wrong value is refused with the value shown, not converted into something else)."""
    if name == "broker":
        if not isinstance(value, str):
            return not isinstance(value, (list, tuple))
        text = value.strip()
        if text.startswith(("aiokafka://", "confluent://")) or ";" in text:
            return False
        hosts = [h.removeprefix("kafka://").rstrip("/") for h in text.split(",")]
        return all(":" in h.rsplit("]", 1)[-1] for h in hosts)
    if name == "processing_guarantee":
        return str(getattr(value, "value", value)) != "exactly_once"
    if name == "store":
        return not isinstance(value, str) or not value.startswith(("rocksdict:", "rocksdb:"))
    return True


def translate(settings: Mapping[str, Any], *, where: str = "App()") -> dict[str, Any]:
    """Our settings from ``settings`` (ours and Faust's), warning about those without effect.

    Raises :class:`ConfigError` for a name that is neither ours nor Faust's.
    """
    ours: dict[str, Any] = {}
    fields = _field_names(AppSettings) - {"faust"}
    faust: dict[str, Any] = {}
    for name, value in settings.items():
        if name in MAPPED and not (name in fields and _ours_already(name, value)):
            target, convert = MAPPED[name]
            if value is None:
                continue  # Faust's "use the default"
            try:
                ours[target] = convert(value)
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    name, f"{value!r} is not valid ({exc})", "fix the value"
                ) from None
        elif name in fields:
            if name == "processing_guarantee":
                value = _guarantee(value)
            ours[name] = value
        elif name in NO_EFFECT:
            _warn_once(name, NO_EFFECT[name])
            faust[name] = value
        else:
            close = difflib.get_close_matches(name, sorted(fields | set(MAPPED)), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                name,
                f"is neither a streams_app nor a Faust setting ({where})",
                f"{hint}check the spelling; docs/settings.md lists ours, "
                "docs/migrating-from-faust.md Faust's",
            )
    if faust:
        ours["faust"] = faust
    return ours


def build_settings(id: str, settings: Mapping[str, Any]) -> AppSettings:
    """``App(id, **settings)``: Faust's and our settings, then ``version`` applied to the id."""
    translated = translate(settings)
    faust = translated.pop("faust", {})
    version = int(translated.get("version", 1))
    id_format = str(translated.get("id_format", "{id}-v{version}"))
    app_id = id
    if version > 1:
        app_id = id_format.replace("{self.version}", "{version}").format(id=id, version=version)
    conf = AppSettings.build(app_id, translated)
    assert isinstance(conf, AppSettings)
    conf.faust.update(faust)
    conf.faust["_name"] = id
    return conf
