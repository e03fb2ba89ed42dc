"""``@app.page`` and Faust's ``table_route`` / ``topic_route``: web views, declared here and
served by each worker's web server (``streams_app.runtime.web``).

A page keeps its path, its handler (``async def view(web, request, **match)``, or a class with
``get``/``post`` methods; ``web`` makes responses: ``web.json(...)``, ``web.text(...)``), and the
route that says which worker owns the request: the one holding the table partition of
``match_info``'s (or ``query_param``'s) key (``table_route``, which the web server redirects as
Faust does), or the topic partition (``topic_route``: recorded, not yet redirected).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Route:
    """Which worker answers: the owner of ``match_info``'s key in ``table`` or ``topic``."""

    kind: str  # "table" or "topic"
    target: Any
    match_info: str | None = None
    query_param: str | None = None
    exclude_headers: tuple[str, ...] = ()


@dataclass
class Page:
    path: str
    view: Callable[..., Any]
    base: Any = None
    cors_options: Any = None
    name: str | None = None

    @property
    def route(self) -> Route | None:
        return getattr(self.view, "__streams_app_route__", None)


def routed(kind: str, target: Any, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """The decorator ``table_route``/``topic_route`` return: tag the view with its route."""
    route = Route(
        kind,
        target,
        match_info=options.get("match_info"),
        query_param=options.get("query_param"),
        exclude_headers=tuple(options.get("exclude_headers") or ()),
    )

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        view.__streams_app_route__ = route  # type: ignore[attr-defined]
        return view

    return decorate
