"""The exactly-once test topology, modelled on Kafka Streams' ``EosTest`` (complex topology).

    streams-app -A topologies.eos_test worker

``data`` carries keyed integers (key: a UTF-8 number, value: a JSON integer). Two agents read it:

- ``aggregate`` echoes each record to ``echo`` and keeps a running ``sum``, ``min`` and count
  (``cnt``) per key in three changelog-backed tables, emitting each new value to the topic of
  the same name;
- ``maximum`` re-keys each record by its *bucket* (``value % 1000``) through a ``group_by``
  repartition topic and emits the running ``max`` per bucket.

Every record sent while processing carries the lineage header ``src`` (``topic:partition:offset``,
so every output is traceable to the input it came from) and, with
``STREAMS_APP_TRANSACTION_HEADERS=1``, ``txn_id`` and ``generation`` (who committed it, under
which group generation). ``streams_app.chaos`` drives this topology and verifies its output.

Topic and app names take the suffix ``EOS_TEST_SUFFIX`` (``data-<suffix>``, ...), so runs and
tests never share topics.
"""

from __future__ import annotations

import os

from streams_app import App

SUFFIX = os.environ.get("EOS_TEST_SUFFIX", "")
_SFX = f"-{SUFFIX}" if SUFFIX else ""
#: Buckets of the repartition hop: the new key is ``value % BUCKETS``.
BUCKETS = 1000

app = App(f"eos-test{_SFX}", topic_partitions=5)

data = app.topic(f"data{_SFX}", key_serializer="str", value_serializer="json")
echo = app.topic(f"echo{_SFX}", key_serializer="str", value_serializer="json")
sum_topic = app.topic(f"sum{_SFX}", key_serializer="str", value_serializer="json")
min_topic = app.topic(f"min{_SFX}", key_serializer="str", value_serializer="json")
cnt_topic = app.topic(f"cnt{_SFX}", key_serializer="str", value_serializer="json")
max_topic = app.topic(f"max{_SFX}", key_serializer="json", value_serializer="json")

sums = app.Table("sum", default=int, key_type=str, value_type=int)
mins = app.Table("min", key_type=str, value_type=int)
counts = app.Table("cnt", default=int, key_type=str, value_type=int)
maxes = app.Table("max", key_type="json", value_type=int)


def bucket(value: int) -> int:
    return value % BUCKETS


@app.agent(data)
async def aggregate(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.items():
        await echo.send(key=key, value=value)
        total = sums[key] + value
        sums[key] = total
        await sum_topic.send(key=key, value=total)
        low = mins.get(key)
        low = value if low is None or value < low else low
        mins[key] = low
        await min_topic.send(key=key, value=low)
        count = counts[key] + 1
        counts[key] = count
        await cnt_topic.send(key=key, value=count)


@app.agent(data)
async def maximum(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.group_by(bucket, name="bucket").items():
        high = maxes.get(key)
        high = value if high is None or value > high else high
        maxes[key] = high
        await max_topic.send(key=key, value=high)
