"""Serving the app's ``@app.page`` views (declared in :mod:`streams_app.app.pages`).

As in Faust: a function view is called as ``await view(web, request, **match)`` for GET (and
HEAD); a class view is instantiated once (``cls(app, web)`` if its constructor takes them, else
``cls()``) and its ``get``/``post``/``put``/``patch``/``delete`` methods are called as
``await method(request, **match)``. ``web`` makes responses (``web.json(...)``, ``web.text(...)``,
``web.html(...)``, ``web.bytes(...)``, ``web.error(status, reason)``); a view may also return a
dict or list (JSON), a str (text), bytes, or None (204).

A view tagged with Faust's ``table_route`` (``page.route``, kind ``"table"``) is answered by
the worker that owns the key's table partition: another worker's request is redirected there,
as ``/tables`` does. The view runs with the worker as ``current_runtime``, so ``table[key]``
(the committed state, runtime/local_reads.py), ``table.local_items()`` and ``topic.send``
(outside any transaction) work inside it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from streams_app.app.pages import Page
from streams_app.runtime.web.queries import jsonable, owner_of, parse_key
from streams_app.topology.contract import current_runtime

if TYPE_CHECKING:
    from streams_app.runtime.view import WorkerView

log = logging.getLogger(__name__)

METHODS = ("get", "post", "put", "patch", "delete")


class Web:
    """What a view gets as ``web``: response makers (Faust's ``View`` helpers)."""

    def __init__(self, worker: WorkerView) -> None:
        self.worker = worker
        self.app = worker.app

    def json(
        self, value: Any, *, status: int = 200, headers: dict[str, str] | None = None
    ) -> web.Response:
        return web.json_response(jsonable(value), status=status, headers=headers)

    def text(
        self,
        value: str,
        *,
        content_type: str = "text/plain",
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        return web.Response(text=value, content_type=content_type, status=status, headers=headers)

    def html(
        self, value: str, *, status: int = 200, headers: dict[str, str] | None = None
    ) -> web.Response:
        return self.text(value, content_type="text/html", status=status, headers=headers)

    def bytes(
        self,
        value: bytes,
        *,
        content_type: str = "application/octet-stream",
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        return web.Response(body=value, content_type=content_type, status=status, headers=headers)

    def error(self, status: int, reason: str, **context: Any) -> web.Response:
        return self.json({"error": reason, **context}, status=status)

    def notfound(self, reason: str = "Not Found", **context: Any) -> web.Response:
        return self.error(404, reason, **context)


def _instantiate(cls: type[Any], worker: WorkerView, helper: Web) -> Any:
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    return cls(worker.app, helper) if len(parameters) >= 2 else cls()


def _response(result: Any) -> web.StreamResponse:
    if isinstance(result, web.StreamResponse):
        return result
    if result is None:
        return web.Response(status=204)
    if isinstance(result, str):
        return web.Response(text=result)
    if isinstance(result, (bytes, bytearray)):
        return web.Response(body=bytes(result))
    return web.json_response(jsonable(result))


def handlers(
    worker: WorkerView, page: Page, helper: Web
) -> dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]:
    """``{HTTP method: aiohttp handler}`` for one page."""
    view = page.view
    calls: dict[str, Callable[..., Awaitable[Any]]] = {}
    if inspect.isclass(view):
        instance = _instantiate(view, worker, helper)
        for method in METHODS:
            bound = getattr(instance, method, None)
            if callable(bound):
                calls[method.upper()] = bound
    else:

        async def call(request: web.Request, **match: str) -> Any:
            return await view(helper, request, **match)

        calls["GET"] = call

    def make(
        call: Callable[..., Awaitable[Any]],
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            redirect = _route(worker, page, request)
            if redirect is not None:
                return redirect
            token = current_runtime.set(worker.runtime)
            try:
                result = await call(request, **request.match_info)
            except web.HTTPException:
                raise
            except Exception as exc:
                log.error("page %s failed: %s", page.path, type(exc).__name__, exc_info=exc)
                return web.json_response({"error": type(exc).__name__}, status=500)
            finally:
                current_runtime.reset(token)
            return _response(result)

        return handle

    return {method: make(call) for method, call in calls.items()}


def _route(worker: WorkerView, page: Page, request: web.Request) -> web.StreamResponse | None:
    """Faust's ``table_route``: redirect to the worker owning the key's partition."""
    route = page.route
    if route is None or getattr(route, "kind", None) != "table":
        return None
    table = route.target
    text = None
    match_info = getattr(route, "match_info", None)
    query_param = getattr(route, "query_param", None)
    if match_info:
        text = request.match_info.get(match_info)
    elif query_param:
        text = request.query.get(query_param)
    if text is None or request.query.get("forwarded"):
        return None
    try:
        raw_key = table.partition_key_bytes(parse_key(table, text))
    except Exception:
        return None  # the view decides what a bad key means
    owner = owner_of(worker, table, raw_key)
    if owner is None or owner.local or owner.address is None:
        return None
    location = owner.address.rstrip("/") + str(request.rel_url.update_query(forwarded="1"))
    raise web.HTTPTemporaryRedirect(location)
