"""``streams-app -A module send TOPIC [VALUE | - | --file PATH] --key K``: put one record on a
topic, checked first.

The value is JSON, from the command line, from stdin (``-``) or from a file (``--file``). Before
anything is sent:

- it must fit the topic's declared type (the same check a worker applies when it decodes the
  record, :mod:`streams_app.record_types`): a value a worker would dead-letter is refused here,
  with the reason;
- the topic must not be one the framework writes itself (dead-letter, changelog, repartition
  and Kafka's ``__`` internal topics) unless ``--force`` says so: a record written there by hand
  corrupts a table or shows up as a failure that never happened;
- the topic must exist: the broker is asked once, and a missing topic is named at once (a
  producer would wait a minute for its metadata, logging all along).

``--raw`` sends the key and value bytes exactly as given (the argument's UTF-8 bytes, stdin's
or the file's bytes), unchecked: a record a worker will dead-letter, to test one's own
dead-letter handling without writing a producer. The topic checks above still apply.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import NamedTuple

from streams_app.app.app import App
from streams_app.app.topic import Topic
from streams_app.cli.loader import load_app
from streams_app.codecs import DecodeError
from streams_app.errors import StreamsAppError
from streams_app.runtime.topology import dead_letter_topic

#: How long ``send`` waits for the broker to acknowledge the record.
SEND_TIMEOUT_S = 15.0


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "send",
        parents=parents,
        help="send one record to a topic of the app (-A), checked against the topic's type",
    )
    parser.add_argument("topic")
    parser.add_argument(
        "value",
        nargs="?",
        help="the value as JSON (checked against the topic's value type); '-' reads stdin",
    )
    parser.add_argument("--file", type=Path, help="read the value (JSON) from this file")
    parser.add_argument("--key", help="the key (a string; JSON if the topic's keys are JSON)")
    parser.add_argument("--partition", type=int)
    parser.add_argument(
        "--force",
        action="store_true",
        help="send even to a dead-letter, changelog, repartition or internal (__) topic",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="send the key and value bytes as given, unchecked (e.g. a record a worker will "
        "dead-letter)",
    )
    parser.set_defaults(func=run, late_positional="value")


def run(args: argparse.Namespace) -> int:
    target = getattr(args, "streams_app_target", None)
    app = target if target is not None else load_app(args.app)
    if getattr(args, "raw", False):
        record = RawRecord(
            None if args.key is None else args.key.encode(), read_bytes(args.value, args.file)
        )
        return asyncio.run(
            send(app, args.topic, "", partition=args.partition, force=args.force, raw_record=record)
        )
    text = read_value(args.value, args.file)
    return asyncio.run(
        send(app, args.topic, text, key=args.key, partition=args.partition, force=args.force)
    )


class RawRecord(NamedTuple):
    """``send --raw``: the key and value bytes, sent as they are."""

    key: bytes | None
    value: bytes


def read_bytes(value: str | None, file: Path | None) -> bytes:
    """``--raw``: the value's bytes from exactly one of: the argument (UTF-8), stdin (``-``),
    ``--file``, as they are."""
    if file is not None and value is not None:
        raise StreamsAppError("give the value either as an argument or with --file, not both")
    if file is not None:
        try:
            return file.read_bytes()
        except OSError as exc:
            raise StreamsAppError(f"cannot read --file {str(file)!r}: {exc}") from exc
    if value is None:
        raise StreamsAppError("no value: pass it, '-' to read stdin, or --file PATH")
    if value == "-":
        return sys.stdin.buffer.read()
    return value.encode()


def read_value(value: str | None, file: Path | None) -> str:
    """The value's JSON text from exactly one of: the argument, stdin (``-``), ``--file``."""
    if file is not None and value is not None:
        raise StreamsAppError("give the value either as an argument or with --file, not both")
    if file is not None:
        try:
            return file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise StreamsAppError(f"cannot read --file {str(file)!r}: {exc}") from exc
    if value is None:
        raise StreamsAppError("no value: pass it as JSON, '-' to read stdin, or --file PATH")
    if value == "-":
        return sys.stdin.read()
    return value


def framework_topic(app: App, name: str) -> str | None:
    """Why ``name`` is a topic the framework (or Kafka) writes itself; None if it is not."""
    if name.startswith("__"):
        return "a Kafka internal topic"
    conf = app.conf
    dead_letters = {dead_letter_topic(conf, t) for t in app.topics}
    dead_letters |= {dead_letter_topic(conf, a.channel.name) for a in app.agents}
    if name in dead_letters or name.endswith(".dlq"):
        return "a dead-letter topic (the worker writes failed records there)"
    changelogs = {t.changelog_topic_name for t in app.tables.values()}
    if name in changelogs or name.endswith("-changelog"):
        return "a table's changelog (writing it by hand changes the table behind the worker)"
    topic = app.topics.get(name)
    if (topic is not None and topic.internal) or name.endswith("-repartition"):
        return "a repartition topic (the worker writes it from group_by)"
    return None


def encode(topic: Topic, text: str, key: str | None) -> tuple[bytes | None, bytes | None]:
    """The record's key and value bytes, once the value fits the topic's type."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StreamsAppError(f"the value is not JSON: {exc}") from exc
    try:
        value = topic.value_codec.loads(json.dumps(payload).encode())
        key_obj = None if key is None else topic.key_codec.loads(key.encode())
    except DecodeError as exc:
        raise StreamsAppError(
            f"refusing to send to {topic.name!r}: {exc} (a worker would dead-letter it)"
        ) from exc
    return topic.encode(key_obj, value)


async def send(
    app: App,
    topic_name: str,
    text: str,
    *,
    key: str | None = None,
    partition: int | None = None,
    force: bool = False,
    raw_record: RawRecord | None = None,
) -> int:
    reason = framework_topic(app, topic_name)
    if reason is not None and not force:
        raise StreamsAppError(
            f"refusing to send to {topic_name!r}: it is {reason}. Pass --force if you mean it"
        )
    topic = app.topics.get(topic_name) or app.topic(topic_name)
    raw_key, raw_value = raw_record if raw_record is not None else encode(topic, text, key)
    transport = app.transport()
    admin = transport.admin()
    await admin.start()  # BrokerUnavailable names the address
    try:
        counts = await admin.partition_counts([topic_name])
    finally:
        await admin.close()
    if topic_name not in counts:
        raise StreamsAppError(
            f"topic {topic_name!r} does not exist on {transport.address}. Start the app's "
            "worker once (it creates the topics it declares), or check the name"
        )
    if partition is not None and not 0 <= partition < counts[topic_name]:
        raise StreamsAppError(
            f"topic {topic_name!r} has partitions 0..{counts[topic_name] - 1}, not {partition}"
        )
    async with app.producer(transport=transport) as producer:
        raw = Topic(app, topic_name, key_serializer="raw", value_serializer="raw")
        future = await producer.send(raw, key=raw_key, value=raw_value, partition=partition)
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                await producer.flush()
        except TimeoutError:
            raise StreamsAppError(
                f"the broker at {transport.address} did not acknowledge the record to "
                f"{topic_name!r} within {SEND_TIMEOUT_S:g} s"
            ) from None
        metadata = future.result()
    print(f"sent to {metadata.topic}[{metadata.partition}] at offset {metadata.offset}")
    return 0
