"""``streams-app -A module send TOPIC --key K VALUE_JSON``: put one record on a topic."""

from __future__ import annotations

import argparse
import asyncio
import json

from streams_app.app.app import App
from streams_app.cli.loader import load_app
from streams_app.errors import StreamsAppError


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "send", parents=parents, help="send one record to a topic of the app (-A)"
    )
    parser.add_argument("topic")
    parser.add_argument("value", help="the value as JSON (decoded with the topic's value type)")
    parser.add_argument("--key", help="the key (a string; JSON if the topic's keys are JSON)")
    parser.add_argument("--partition", type=int)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target = getattr(args, "streams_app_target", None)
    app = target if target is not None else load_app(args.app)
    return asyncio.run(_send(app, args.topic, args.key, args.value, args.partition))


async def _send(
    app: App, topic_name: str, key: str | None, value: str, partition: int | None
) -> int:
    topic = app.topics.get(topic_name) or app.topic(topic_name)
    try:
        payload = json.loads(value)
    except json.JSONDecodeError as exc:
        raise StreamsAppError(f"VALUE_JSON is not JSON: {exc}") from exc
    value_obj = topic.value_codec.loads(json.dumps(payload).encode())
    key_obj = None if key is None else topic.key_codec.loads(key.encode())
    async with app.producer() as producer:
        future = await producer.send(topic, key=key_obj, value=value_obj, partition=partition)
        await producer.flush()
        metadata = future.result()
    print(f"sent to {metadata.topic}[{metadata.partition}] at offset {metadata.offset}")
    return 0
