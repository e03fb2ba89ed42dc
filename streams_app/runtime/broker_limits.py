"""Our settings against the limits only the broker knows, checked when the worker starts.

Without this check a ``transaction_timeout`` above the broker's ``transaction.max.timeout.ms``
surfaces as ``InvalidTransactionTimeout()`` from InitProducerId, a ``session_timeout`` outside
``group.min/max.session.timeout.ms`` as ``InvalidSessionTimeoutError()`` on every fetch, and a
``max_request_size`` above ``message.max.bytes`` as records the broker refuses long after the
start (a dead-letter send that can never succeed). Kafka Streams leaves all three to the broker;
we name our setting and the broker's value before anything is consumed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from streams_app.errors import ConfigError
from streams_app.settings import Settings
from streams_app.transport.base import BrokerLimits


def check_broker_limits(settings: Settings, limits: Collection[BrokerLimits]) -> None:
    """Raise :class:`ConfigError` for the first setting a broker would refuse."""
    for broker in limits:
        where = f"the broker at {broker.broker}"
        txn_ms = int(settings.transaction_timeout * 1000)
        if (
            settings.exactly_once
            and broker.transaction_max_timeout_ms is not None
            and txn_ms > broker.transaction_max_timeout_ms
        ):
            raise ConfigError(
                "transaction_timeout",
                f"{settings.transaction_timeout}s is above {where}'s transaction.max.timeout.ms "
                f"({broker.transaction_max_timeout_ms} ms): it would refuse every transaction",
                f"use transaction_timeout <= {broker.transaction_max_timeout_ms / 1000:g}, or "
                "raise transaction.max.timeout.ms on the brokers",
            )
        session_ms = int(settings.session_timeout * 1000)
        low, high = broker.group_min_session_timeout_ms, broker.group_max_session_timeout_ms
        if (low is not None and session_ms < low) or (high is not None and session_ms > high):
            raise ConfigError(
                "session_timeout",
                f"{settings.session_timeout}s is outside {where}'s allowed range "
                f"group.min.session.timeout.ms..group.max.session.timeout.ms = "
                f"{low} ms..{high} ms: it would refuse the worker's group membership",
                f"use a session_timeout between {(low or 0) / 1000:g} and "
                f"{(high or 0) / 1000:g} seconds, or change the brokers' range",
            )
        if broker.message_max_bytes is not None:
            for name in ("max_request_size", "producer_max_batch_size"):
                value = getattr(settings, name)
                if value > broker.message_max_bytes:
                    raise ConfigError(
                        name,
                        f"{value} bytes is above {where}'s message.max.bytes "
                        f"({broker.message_max_bytes}): it would refuse such batches",
                        f"use {name} <= {broker.message_max_bytes}, or raise message.max.bytes",
                    )


#: The topic setting :func:`check_topic_limits` reads.
TOPIC_LIMIT_KEYS = ("max.message.bytes",)


def check_topic_limits(settings: Settings, configs: Mapping[str, Mapping[str, str]]) -> None:
    """Raise :class:`ConfigError` when a topic we write (``configs``: its settings as the broker
    has them, by name) refuses batches our producer may send."""
    for topic, config in sorted(configs.items()):
        if "max.message.bytes" not in config:
            continue
        limit = int(config["max.message.bytes"])
        for name in ("max_request_size", "producer_max_batch_size"):
            value = getattr(settings, name)
            if value > limit:
                raise ConfigError(
                    name,
                    f"{value} bytes is above the max.message.bytes of topic {topic!r} ({limit}): "
                    "the broker would refuse such batches",
                    f"use {name} <= {limit}, or raise the topic's max.message.bytes",
                )
