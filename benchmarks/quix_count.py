"""The count topology on quixstreams, for the benchmark's comparison rows.

The same logic as ``benchmarks/json_count.py``: each value parsed as JSON (its ``json``
deserializer), a running count per key in quixstreams' RocksDB state
(``stateful=True``, changelog topics on, its default), one output record per input, under
``exactly-once`` or ``at-least-once``. The commit interval is the benchmark's for the guarantee
(quixstreams' own default is 5 s) so that every system commits equally often. Run by
:mod:`benchmarks.child` in its own process; quixstreams owns the loop and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from benchmarks.child import INPUT_TOPIC, FirstRecord

#: Created by benchmarks.run (quixstreams creates only its changelog topics).
QUIX_OUTPUT_TOPIC = "quix-count-output"

GUARANTEES = {"exactly_once_v2": "exactly-once", "at_least_once": "at-least-once"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from quixstreams import Application, State

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee=GUARANTEES[args.guarantee],  # type: ignore[arg-type]
        commit_interval=args.commit_interval,
        state_dir=args.state_dir,
        use_changelog_topics=True,
        loglevel=logging.WARNING,
    )
    source = app.topic(INPUT_TOPIC, key_deserializer="bytes", value_deserializer="json")
    totals = app.topic(QUIX_OUTPUT_TOPIC, key_serializer="bytes", value_serializer="json")
    first = FirstRecord()
    processed = 0

    def count(_value: Any, state: State) -> int:
        nonlocal processed
        first()
        total: int = state.get("count", 0) + 1
        state.set("count", total)
        processed += 1
        return total

    app.dataframe(source).apply(count, stateful=True).to_topic(totals)
    app.run()
    stats = {"records_processed": processed}
    print("STATS " + json.dumps(stats), flush=True)
    return stats
