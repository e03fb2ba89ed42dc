"""The count topology on faust-streaming, for the benchmark's comparison row.

The same logic as ``benchmarks/json_count.py`` (each value parsed as JSON, a running count
per key in a RocksDB table, one output record per input) with faust-streaming's own
``processing_guarantee="exactly_once"`` (its aiokafka driver: one transactional producer per
partition) and its defaults otherwise,
commit interval included (``broker_commit_interval``, 2.8 s) unless ``--commit-interval`` is
given. Run by :mod:`benchmarks.child` in its own process; faust owns the event loop.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from typing import Any

from benchmarks.child import INPUT_TOPIC, FirstRecord

#: Created by benchmarks.run (faust creates only its internal topics).
FAUST_OUTPUT_TOPIC = "faust-count-output"


def run(args: argparse.Namespace) -> dict[str, Any]:
    import faust

    os.makedirs(args.state_dir, exist_ok=True)
    settings: dict[str, Any] = {}
    if args.commit_interval is not None:
        settings["broker_commit_interval"] = args.commit_interval
    app = faust.App(
        args.group,
        broker=f"kafka://{args.bootstrap}",
        processing_guarantee="exactly_once",
        store="rocksdb://",
        datadir=args.state_dir,
        topic_partitions=8,
        web_enabled=False,
        **settings,
    )
    source = app.topic(INPUT_TOPIC, key_type=bytes, value_serializer="json")
    totals = app.topic(FAUST_OUTPUT_TOPIC, key_type=str, value_serializer="json")
    counts = app.Table("counts", default=int, partitions=8)
    first = FirstRecord()
    processed = 0

    @app.agent(source)
    async def count(stream):  # type: ignore[no-untyped-def]
        nonlocal processed
        async for key, _value in stream.items():
            first()
            name = key.decode()
            counts[name] += 1
            await totals.send(key=name, value=counts[name])
            processed += 1

    worker = faust.Worker(app, loglevel=logging.WARNING, quiet=True, redirect_stdouts=False)
    with contextlib.suppress(SystemExit):
        worker.execute_from_commandline()
    stats = {"records_processed": processed, "commit_interval_s": app.conf.broker_commit_interval}
    print("STATS " + json.dumps(stats, default=str), flush=True)
    return stats
