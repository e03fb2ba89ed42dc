"""``streams-app txn list|describe|dump|hanging``: the transaction inspector.

- ``list``: every transactional id with its state, producer id and epoch, start time, age and
  partitions (KIP-664 ListTransactions + DescribeTransactions); with ``-A`` only the app's.
- ``describe ID``: one id in detail and its history from ``__transaction_state``.
- ``dump TOPIC PARTITION``: the partition batch by batch, markers included, and what a
  read_committed reader sees (Fetch read_uncommitted: no access to broker files needed).
- ``hanging [--abort]``: open transactions that hold a partition's last stable offset with no
  coordinator left to end them; ``--abort`` writes an ABORT marker after a confirmation.

Exit status: 0 when fine; ``hanging`` exits 1 while a hanging transaction remains (for alerts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from streams_app.cli.connect import add_bootstrap_option, client_kwargs, settings_for
from streams_app.errors import StreamsAppError
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.ops.dump import dump_partition
from streams_app.ops.render import parse_duration
from streams_app.ops.transactions import (
    HANGING,
    abort_hanging,
    describe_transaction,
    list_transactions,
    open_transactions,
    state_name,
)
from streams_app.ops.txn_json import detail_json, dump_json, list_json, open_json
from streams_app.ops.txn_report import format_detail, format_dump, format_list, format_open


def _duration_ms(text: str) -> int:
    try:
        return int(parse_duration(text) * 1000)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _at_least(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _state(text: str) -> str:
    try:
        return state_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "txn",
        parents=parents,
        help="inspect transactions: list, describe, dump a partition, find hanging ones",
        description="The transaction inspector (Kafka's KIP-664 admin APIs and the raw log).",
    )
    actions = parser.add_subparsers(dest="txn_command", required=True)

    listing = actions.add_parser("list", help="transactional ids, their state and age")
    listing.add_argument(
        "--state",
        action="append",
        type=_state,
        default=[],
        help="only this state (ongoing, preparecommit, prepareabort, completecommit, "
        "completeabort, empty, ...); repeatable",
    )
    listing.add_argument(
        "--older-than",
        type=_duration_ms,
        metavar="DURATION",
        help="only open transactions that began longer ago (e.g. 60s, 5m)",
    )
    listing.add_argument(
        "--all", action="store_true", help="with -A: every transactional id, not just the app's"
    )

    describe = actions.add_parser("describe", help="one transactional id and its history")
    describe.add_argument("transactional_id")
    describe.add_argument(
        "--no-history", action="store_true", help="skip reading __transaction_state"
    )

    dump = actions.add_parser("dump", help="a partition batch by batch, markers included")
    dump.add_argument("topic")
    dump.add_argument("partition", type=_at_least(0))
    dump.add_argument(
        "--from", dest="from_offset", type=_at_least(0), help="first offset (default: log start)"
    )
    dump.add_argument("--count", type=_at_least(1), help="at most this many batches")
    dump.add_argument(
        "--records",
        action="store_true",
        help="one line per record too, as kafka-dump-log.sh --deep-iteration (no data shown)",
    )

    hanging = actions.add_parser(
        "hanging", help="open transactions no coordinator will end (they hold the LSO)"
    )
    hanging.add_argument("--topic", action="append", help="only this topic; repeatable")
    hanging.add_argument(
        "--max-timeout",
        type=_duration_ms,
        metavar="DURATION",
        help="the brokers' transaction.max.timeout.ms (default: read from the brokers)",
    )
    hanging.add_argument(
        "--abort", action="store_true", help="abort each hanging transaction (asks first)"
    )
    hanging.add_argument("--yes", action="store_true", help="with --abort: do not ask")
    for action in (listing, describe, dump, hanging):
        add_bootstrap_option(action)
        action.add_argument(
            "--json", action="store_true", help="print JSON (docs/operations.md lists the fields)"
        )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    conf = settings_for(args)
    async with OpsAdmin(conf.bootstrap_servers, **client_kwargs(conf)) as admin:
        command = args.txn_command
        if command == "list":
            prefix = None
            if getattr(args, "app", None) and not args.all:
                prefix = f"{conf.id}-"
            listing = await list_transactions(
                admin, states=args.state, older_than_ms=args.older_than, prefix=prefix
            )
            _out(args, format_list(listing), lambda: list_json(listing))
            return 0
        if command == "describe":
            detail = await describe_transaction(
                admin, args.transactional_id, history=not args.no_history
            )
            _out(args, format_detail(detail), lambda: detail_json(detail))
            return 0 if detail.current is not None or detail.history else 1
        if command == "dump":
            dumped = await dump_partition(
                admin, args.topic, args.partition, from_offset=args.from_offset, count=args.count
            )
            _out(
                args,
                format_dump(dumped, records=args.records),
                lambda: dump_json(dumped, records=args.records),
            )
            return 0
        return await _hanging(admin, args)


def _out(args: argparse.Namespace, text: str, data: Callable[[], Any]) -> None:
    """The text, or with ``--json`` the data as one JSON document."""
    print(json.dumps(data(), sort_keys=True) if args.json else text)


async def _hanging(admin: OpsAdmin, args: argparse.Namespace) -> int:
    if args.json and args.abort and not args.yes:
        raise StreamsAppError("--json --abort needs --yes: the questions would mix with the JSON")
    found = await open_transactions(admin, topics=args.topic, max_timeout_ms=args.max_timeout)
    hanging = [t for t in found if t.verdict == HANGING]
    if not args.json:
        print(format_open(found))
    if not args.abort:
        if args.json:
            _print_json({"transactions": open_json(found), "aborted": [], "left": []})
        return 1 if hanging else 0
    aborted: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    for txn in hanging:
        question = (
            f"Abort the transaction of producer {txn.producer.producer_id} (epoch "
            f"{txn.producer.producer_epoch}) on {txn.topic}[{txn.partition}] from offset "
            f"{txn.start_offset}? Its records will never be read. [y/N] "
        )
        if not args.yes and not confirm(question):
            print(f"left {txn.topic}[{txn.partition}] alone")
            left.append({"topic": txn.topic, "partition": txn.partition})
            continue
        await abort_hanging(admin, txn)
        lso = (await admin.end_offsets([txn.tp], committed=True))[txn.tp]
        high = (await admin.end_offsets([txn.tp]))[txn.tp]
        aborted.append(
            {
                "topic": txn.topic,
                "partition": txn.partition,
                "producer_id": txn.producer.producer_id,
                "last_stable_offset": lso,
                "high_watermark": high,
            }
        )
        if not args.json:
            print(
                f"aborted: {txn.topic}[{txn.partition}] producer {txn.producer.producer_id}; "
                f"last stable offset now {lso} (high watermark {high})"
            )
    if args.json:
        _print_json({"transactions": open_json(found), "aborted": aborted, "left": left})
    return 1 if left else 0


def _print_json(data: Any) -> None:
    print(json.dumps(data, sort_keys=True))


def confirm(question: str) -> bool:
    """Ask on stdout, read the answer from stdin (a pipe works too); only y/yes is yes."""
    print(question, end="", flush=True)
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():
        print(answer.strip())  # echo a piped answer, so the transcript reads like a terminal
    return answer.strip().lower() in ("y", "yes")
