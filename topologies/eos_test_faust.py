"""``topologies.eos_test`` written for faust-streaming, for the chaos suite's comparison row.

    faust -A topologies.eos_test_faust worker -l info

The same topics, keys, values and aggregates as :mod:`topologies.eos_test` (echo; running sum,
min and count per key; max per ``value % 1000`` bucket after a ``group_by`` repartition hop),
with faust-streaming's own exactly-once mode (``processing_guarantee="exactly_once"``: its
aiokafka driver, one transactional producer per partition) and its rocksdict store. Outputs carry
lineage, in the split format (``src_topic``, ``src_partition``, ``src_offset``: the verifier
reads both, streams_app.lineage), and the consumer
generation (``generation``) the record was processed under, added by this module, since Faust
adds none of its own.

Configuration comes from the environment, so ``streams_app.chaos`` can run it beside the
streams_app version: ``EOS_TEST_SUFFIX`` (topic suffix), ``FAUST_BROKER`` (``host:port;...``),
``FAUST_DATADIR``, ``FAUST_SESSION_TIMEOUT``/``FAUST_HEARTBEAT_INTERVAL`` (seconds),
``FAUST_REPLICATION_FACTOR``, ``FAUST_STANDBY_REPLICAS`` (Faust's default: 1),
``FAUST_GROUP_INSTANCE_ID`` (static membership; unset: dynamic).
"""

from __future__ import annotations

import os
from typing import Any

import faust

SUFFIX = os.environ.get("EOS_TEST_SUFFIX", "")
_SFX = f"-{SUFFIX}" if SUFFIX else ""
BUCKETS = 1000

_brokers = os.environ.get("FAUST_BROKER", "localhost:9092").replace(",", ";")
_datadir = os.environ.get("FAUST_DATADIR", "faust-data")
os.makedirs(_datadir, exist_ok=True)
app = faust.App(
    f"eos-faust{_SFX}",
    broker=";".join(f"kafka://{b.removeprefix('kafka://')}" for b in _brokers.split(";")),
    processing_guarantee=os.environ.get("FAUST_GUARANTEE", "exactly_once"),
    store="rocksdb://",
    datadir=_datadir,
    topic_partitions=5,
    topic_replication_factor=int(os.environ.get("FAUST_REPLICATION_FACTOR", "1")),
    broker_session_timeout=float(os.environ.get("FAUST_SESSION_TIMEOUT", "10")),
    broker_heartbeat_interval=float(os.environ.get("FAUST_HEARTBEAT_INTERVAL", "3")),
    web_enabled=False,
    table_standby_replicas=int(os.environ.get("FAUST_STANDBY_REPLICAS", "1")),
    consumer_group_instance_id=os.environ.get("FAUST_GROUP_INSTANCE_ID") or None,
)

data = app.topic(f"data{_SFX}", key_type=bytes, value_type=int, value_serializer="json")
echo = app.topic(f"echo{_SFX}", key_type=bytes, value_serializer="json")
sum_topic = app.topic(f"sum{_SFX}", key_type=bytes, value_serializer="json")
min_topic = app.topic(f"min{_SFX}", key_type=bytes, value_serializer="json")
cnt_topic = app.topic(f"cnt{_SFX}", key_type=bytes, value_serializer="json")
max_topic = app.topic(f"max{_SFX}", key_type=bytes, value_serializer="json")

sums = app.Table("sum", default=int, partitions=5)
mins = app.Table("min", partitions=5)
counts = app.Table("cnt", default=int, partitions=5)
maxes = app.Table("max", partitions=5)


def _lineage() -> list[tuple[str, bytes]]:
    event = faust.current_event()
    if event is None:
        return [("generation", b"%d" % app.consumer_generation_id)]
    message = event.message
    return [
        ("src_topic", message.topic.encode()),
        ("src_partition", b"%d" % message.partition),
        ("src_offset", b"%d" % message.offset),
        ("generation", b"%d" % app.consumer_generation_id),
    ]


def bucket(value: int) -> bytes:
    """The repartition key, ``value % 1000`` as the bytes of its JSON (as streams_app's).

    Faust's group_by forwards the record with the *consumed record's* headers, so the lineage
    headers are put on it here, where the record is known.
    """
    event = faust.current_event()
    if event is not None:
        event.message.headers = _lineage()
    return b"%d" % (value % BUCKETS)


@app.agent(data)
async def aggregate(stream: Any) -> None:
    async for key, value in stream.items():
        headers = _lineage()
        await echo.send(key=key, value=value, headers=headers)
        total = sums[key] + value
        sums[key] = total
        await sum_topic.send(key=key, value=total, headers=headers)
        low = mins.get(key)
        low = value if low is None or value < low else low
        mins[key] = low
        await min_topic.send(key=key, value=low, headers=headers)
        count = counts[key] + 1
        counts[key] = count
        await cnt_topic.send(key=key, value=count, headers=headers)


@app.agent(data)
async def maximum(stream: Any) -> None:
    async for key, value in stream.group_by(bucket, name="bucket").items():
        high = maxes.get(key)
        high = value if high is None or value > high else high
        maxes[key] = high
        await max_topic.send(key=key, value=high, headers=_lineage())
