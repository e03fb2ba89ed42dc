"""The app-facing API: App, Topic, Agent, Stream, Table (Faust-style)."""

from streams_app.app.agent import Agent
from streams_app.app.app import App, StandaloneProducer
from streams_app.app.postgres import PostgresSink, SinkRecord
from streams_app.app.stream import Stream
from streams_app.app.table import Table
from streams_app.app.topic import Topic
from streams_app.settings import Settings

__all__ = [
    "Agent",
    "App",
    "PostgresSink",
    "Settings",
    "SinkRecord",
    "StandaloneProducer",
    "Stream",
    "Table",
    "Topic",
]
