"""``@app.page(path)``: an app team's own web views, declared here and served by each worker.

Faust's decorator: ``async def view(web, request, **match)`` (``web`` makes responses:
``web.json(...)``, ``web.text(...)``, ``web.html(...)``; ``request`` is the HTTP request; path
parameters such as ``{key}`` arrive as keyword arguments), or a class with ``get``/``post``/...
methods of the same shape. The app layer only records the declaration; the worker's web server
(``streams_app.runtime.web``) serves every page of ``app.pages``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Page:
    path: str
    view: Callable[..., Any]
    base: Any = None
    cors_options: Any = None
    name: str | None = None

    @property
    def route(self) -> Any:
        """Which worker answers (Faust's ``table_route``), when the view was tagged with one."""
        return getattr(self.view, "__streams_app_route__", None)
