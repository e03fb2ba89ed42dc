"""Channel: Faust's in-process queue between agents, timers and sinks, without Kafka.

A value sent to a channel goes straight to the agents reading it, in the same worker. Nothing
is written to Kafka, so it is **outside the transaction**: a channel holds no offsets and
survives no crash. What it does keep is the worker's commit discipline: the worker commits only
once every agent, channel agents included, has finished what it was handed. So a pipeline fed
by Kafka records through channels (``record -> agent -> channel -> agent -> topic``) is still
exactly-once end to end: an abort replays the record, which sends to the channel again. Values
a timer or a task puts on a channel are lost if the worker crashes before they are processed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streams_app.codecs import CodecSpec
from streams_app.topology.contract import current_runtime

if TYPE_CHECKING:
    from streams_app.app.app import App

_numbers = itertools.count(1)


class Channel:
    def __init__(
        self,
        app: App,
        *,
        key_type: CodecSpec = None,
        value_type: CodecSpec = None,
        maxsize: int | None = None,
    ) -> None:
        self.app = app
        self.key_type = key_type
        self.value_type = value_type
        self.maxsize = maxsize
        #: An internal name, used to route values to the agents reading the channel.
        self.name = f"channel-{next(_numbers)}"

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        **_: Any,
    ) -> None:
        runtime = current_runtime.get()
        if runtime is None:
            raise RuntimeError("channel.send() needs a running worker (channels are in-process)")
        await runtime.channel_send(self, key=key, value=value, headers=headers)

    async def put(self, value: Any) -> None:
        await self.send(value=value)

    def __repr__(self) -> str:
        return f"<Channel {self.name}>"
