"""The records of the pageviews topology (JSON on the wire: the fields below, nothing else)."""

from __future__ import annotations

import faust


class PageView(faust.Record, serializer="json"):
    """A user viewed a page (topic ``pageviews``, key: the user).

    ``viewed_at`` (seconds since the epoch) is when it happened on the user's device: the
    record's time for windows, whatever time it reached Kafka.
    """

    user: str
    page: str
    viewed_at: float
