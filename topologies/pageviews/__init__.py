"""The pageviews topology: page views per page per minute, a hopping five-minute view, and user
sessions, each window's final count emitted once when it closes.

    streams-app -A topologies.pageviews worker -l info

``pageviews`` is keyed by user. Its records' time is when the view happened (``viewed_at``, the
topic's ``timestamp_fn``), not when it reached Kafka, so views that arrive late or out of order
still count in the window they belong to, as long as they arrive within the window's grace.

- ``sessions``: a user's views no more than 30 minutes apart form a session; a view that
  bridges two sessions merges them. Final counts go to ``user-sessions`` once a session has been
  idle for 30 minutes plus 5 minutes of grace.
- ``per_page``: views re-keyed by page (``group_by``, through a repartition topic that keeps
  each record's time), counted per page in one-minute tumbling windows (final counts to
  ``page-views-per-minute``, 10 s of grace) and in five-minute windows every minute (to
  ``page-views-5m``, 30 s of grace).

Under exactly-once, a window's final count is emitted in the transaction of the record that
closed it, together with that record's offset and the stream time it moved to: once, even
through crashes. See docs/windows.md.
"""

from __future__ import annotations

from datetime import timedelta

from streams_app import App
from topologies.pageviews.models import PageView

app = App("pageviews", broker="kafka://localhost:9092", topic_partitions=4)

pageviews = app.topic(
    "pageviews", key_type=str, value_type=PageView, timestamp_fn=lambda view: view.viewed_at
)

user_sessions = app.Table("user-sessions", default=int, key_type=str).session(
    timedelta(minutes=30), grace=timedelta(minutes=5), emit_final="user-sessions"
)
views_per_minute = app.Table("views-per-minute", default=int, key_type=str).tumbling(
    timedelta(minutes=1), grace=timedelta(seconds=10), emit_final="page-views-per-minute"
)
views_5m = app.Table("views-5m", default=int, key_type=str).hopping(
    timedelta(minutes=5),
    timedelta(minutes=1),
    grace=timedelta(seconds=30),
    emit_final="page-views-5m",
)


def page_of(view: PageView) -> str:
    return view.page


@app.agent(pageviews)
async def sessions(stream):  # type: ignore[no-untyped-def]
    async for view in stream:
        user_sessions[view.user] += 1


@app.agent(pageviews)
async def per_page(stream):  # type: ignore[no-untyped-def]
    async for view in stream.group_by(page_of):
        views_per_minute[view.page] += 1
        views_5m[view.page] += 1
