"""``streams-app -A module send TOPIC|@AGENT [VALUE | - | --file PATH] --key K``: put one record on
a topic, checked first.

The value comes from the command line, from stdin (``-``) or from a file (``--file``), and is
read as the topic's values are:

- a raw topic (Faust's ``value_serializer="raw"``, ``bytes``, or text): the text as given,
  byte for byte (Faust's quick start: ``send greetings "Hello Kafka topic"``);
- a topic of ``str`` values in JSON (Faust's default): the text itself, encoded as a JSON
  string, so the agent receives exactly the text; a JSON string (``'"x"'``) is that string;
- any other topic: JSON, and text that is not JSON only where the values may be a string.

``@name`` names an agent instead of a topic (Faust's ``send @greet``): the record goes to the
topic the agent reads (its own topic for ``@app.agent()``).

Before anything is sent:

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
from typing import Any, NamedTuple

from streams_app.app.app import App
from streams_app.app.topic import Topic
from streams_app.cli.loader import load_app
from streams_app.codecs import Codec, DecodeError, RawCodec, StrCodec, TypedCodec
from streams_app.errors import StreamsAppError
from streams_app.topology.plan import dead_letter_topic

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
    parser.add_argument("topic", help="a topic of the app, or @agent: the topic the agent reads")
    parser.add_argument(
        "value",
        nargs="?",
        help="the value: text as given for a raw or text topic, JSON otherwise (checked "
        "against the topic's value type); '-' reads stdin",
    )
    parser.add_argument("--file", type=Path, help="read the value from this file")
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
        raise StreamsAppError("no value: pass it as an argument, '-' to read stdin, or --file PATH")
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
    if name in app.own_changelogs() or name.endswith("-changelog"):
        return "a table's changelog (writing it by hand changes the table behind the worker)"
    topic = app.topics.get(name)
    if (topic is not None and topic.internal) or name.endswith("-repartition"):
        return "a repartition topic (the worker writes it from group_by)"
    return None


def resolve(app: App, name: str) -> str:
    """The topic ``name`` means: ``@agent`` is the topic the agent reads (Faust's ``send
    @agent``), by its function name or its full ``module.function`` name."""
    if not name.startswith("@"):
        return name
    wanted = name[1:]
    found = [
        agent
        for agent in app.agents
        if wanted in (agent.name, agent.short_name) or agent.name.endswith(f".{wanted}")
    ]
    if len(found) != 1:
        known = ", ".join(sorted(str(agent.short_name) for agent in app.agents)) or "none"
        what = "several agents" if found else "no agent"
        raise StreamsAppError(
            f"{what} {wanted!r} in app {app.id!r} (its agents: {known}); name one as "
            "@function or @module.function"
        )
    channel = found[0].channel
    if not isinstance(channel, Topic):
        raise StreamsAppError(
            f"agent {wanted!r} reads an in-process channel, which nothing outside its worker "
            "reaches: send to a topic one of the app's agents reads"
        )
    return channel.name


def _as_given(codec: Codec) -> bool:
    """The codec's bytes are the text itself (raw, or plain text, whatever the type)."""
    if isinstance(codec, TypedCodec):
        codec = codec.serializer
    return isinstance(codec, RawCodec | StrCodec)


def _value(topic: Topic, text: str) -> Any:
    """The value ``text`` stands for on ``topic`` (see the module docstring); raises
    DecodeError for a value the worker would dead-letter, StreamsAppError for no value."""
    codec = topic.value_codec
    if _as_given(codec):
        raw = text.encode()
        codec.loads(raw)  # e.g. an int topic of raw text: "abc" is refused
        return raw
    not_json: json.JSONDecodeError | None = None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        payload, not_json = text, exc
    else:
        if topic.value_type is str and not isinstance(payload, str):
            payload = text  # a topic of text: what is not a JSON string is the text itself
    try:
        return codec.loads(json.dumps(payload).encode())
    except DecodeError as exc:
        if not_json is not None:
            raise StreamsAppError(
                f"the value is not JSON ({not_json}), and the values of {topic.name!r} are not text"
            ) from exc
        raise


def encode(topic: Topic, text: str, key: str | None) -> tuple[bytes | None, bytes | None]:
    """The record's key and value bytes, once the value fits the topic's type."""
    try:
        value = _value(topic, text)
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
    topic_name = resolve(app, topic_name)
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
