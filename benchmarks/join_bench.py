"""The join rows of ``make bench`` (issue 37): a stream-table and a stream-stream windowed join
of the count's input, the same joins in streams_app and in Kafka Streams (``JoinBench.java``).

Both join the input (``count-input``: the count's records, JSON values) with
``join-users``: one record per key (``{"user": "key-000042", "tier": "t0"}``), written before
the input, so every input record finds its key's row, and declared compacted, so that a table
built from it keeps the topic as its changelog (Kafka Streams: ``topology.optimization=all``).

- **stream-table**: the input joined with the table built from ``join-users`` (inner);
- **stream-stream**: the input joined with ``join-users`` read as a stream, within an hour
  either side (inner, no grace): the users' records come first (earlier timestamps), so each
  input record pairs with its key's one record, and every input record is buffered in the
  join's window store (what a stream-stream join costs). The input's buffer is declared with
  ``changelog="input"``: the input topic restores it, and the worker does not write each record
  to a changelog again (Kafka Streams writes both buffers' changelogs; it has no such option).

Each input record gives exactly one output, keyed as the input, valued ``"<seq>:<tier>"``
(the input's ``seq`` field, the user's ``tier``): ``benchmarks/check.py`` (kind ``join``)
checks each input once, with its key's tier.
"""

from __future__ import annotations

from typing import Any

from streams_app import App, JoinWindows

INPUT_TOPIC = "count-input"
USERS_TOPIC = "join-users"
TIERS = 7
#: How far apart an input record and its user's record may be (the whole input is minutes).
WINDOW_S = 3600


def tier_of(key: str) -> str:
    """The tier of ``key-000042`` (the users' topic and the check derive it alike)."""
    return f"t{int(key.rsplit('-', 1)[1]) % TIERS}"


def joiner(event: Any, user: Any) -> str:
    return f"{event['seq']}:{user['tier']}"


def build(kind: str, output_topic: str) -> App:
    """The app of one join row (``stream-table`` or ``stream-stream``)."""
    app = App(f"join-{kind}", topic_partitions=4)
    events = app.topic(INPUT_TOPIC, key_type=str, value_serializer="json")
    users = app.topic(
        USERS_TOPIC, key_type=str, value_serializer="json", config={"cleanup.policy": "compact"}
    )
    out = app.topic(output_topic, key_type=str, value_serializer="str")
    if kind == "stream-table":
        events.join(app.Table("join-users-table", source=users), joiner=joiner).to(out)
    elif kind == "stream-stream":
        # The input's buffer restored from the input itself, not changelogged again
        # (docs/joins.md, "The input topic as the buffer's changelog"); the users' topic is
        # compacted, so its buffer keeps a changelog of its own.
        events.join(users, JoinWindows(WINDOW_S), joiner=joiner, changelog="input").to(out)
    else:
        raise ValueError(kind)
    return app
