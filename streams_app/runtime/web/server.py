"""The worker's web server: health, readiness, metrics, table queries, assignment, app pages.

Faust gives every worker a web server on port 6066; Kafka Streams leaves it to the app (its
``application.server`` only names where the app serves). Here each worker serves, on aiohttp
in its own event loop (``web_bind``:``web_port``, 127.0.0.1:6066 by default; ``web_port=0``
takes any free port; ``web_enabled=False`` turns it off):

==========================  ===============================================================
``GET /health``             200 while the worker runs (liveness), 503 once stopped or failed
``GET /ready``              200 once every task is restored and running (readiness), else 503
                            with the reason (starting, rebalancing, restoring, stopping)
``GET /metrics``            Prometheus text format (:mod:`~streams_app.runtime.web.exposition`)
``GET /tables/NAME/KEY``    a table's committed value, or a redirect to the worker owning it
``GET /assignment``         tasks, partitions and offsets, standbys, the group's address map
``/...``                    the app's ``@app.page`` views
==========================  ===============================================================

The server starts first thing in ``Worker.start`` (so ``/health`` answers during a long start,
and a port already in use stops the worker before it joins the group: a
:class:`~streams_app.errors.ConfigError` naming ``web_port``), and stops last. Its address
(``http://web_host:port``) is published to the consumer group for table routing. No access
log: a query's path carries a table key, which is record data.
"""

from __future__ import annotations

import errno
import logging
import socket
from typing import TYPE_CHECKING

from aiohttp import web

from streams_app.errors import ConfigError, TopologyError
from streams_app.runtime.web import exposition, pages, queries, views

if TYPE_CHECKING:
    from streams_app.runtime.view import WorkerView

log = logging.getLogger(__name__)

#: Addresses that mean "every interface": the advertised host is then the machine's name.
_ANY = ("", "0.0.0.0", "::", "*")
ROUTES = ("/health", "/ready", "/metrics", "/tables/{table}/{key}", "/assignment")


def advertised_host(bind: str, host: str | None) -> str:
    if host:
        return host
    if bind in _ANY:
        return socket.gethostname()
    return bind


def url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class WebServer:
    def __init__(self, worker: WorkerView) -> None:
        self.worker = worker
        self.registry = exposition.worker_registry(worker)
        self._runner: web.AppRunner | None = None
        #: The port it listens on (the one the OS chose for ``web_port=0``), once started.
        self.port: int | None = None
        #: ``http://host:port`` other workers and clients reach it at, once started.
        self.url: str | None = None

    def application(self) -> web.Application:
        app = web.Application()
        router = app.router
        router.add_get("/health", self.health)
        router.add_get("/ready", self.ready)
        router.add_get("/metrics", self.metrics)
        router.add_get("/tables/{table}/{key:.+}", self.table)  # a key may hold a '/'
        router.add_get("/assignment", self.assignment)
        helper = pages.Web(self.worker)
        for page in self.worker.app.pages:
            if page.path in ROUTES:
                raise TopologyError(
                    f"@app.page({page.path!r}) would hide the worker's own {page.path} "
                    "endpoint: choose another path"
                )
            for method, handler in pages.handlers(self.worker, page, helper).items():
                router.add_route(method, page.path, handler, name=page.name)
        return app

    async def start(self) -> str:
        conf = self.worker.conf
        runner = web.AppRunner(self.application(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, conf.web_bind, conf.web_port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            address = f"{conf.web_bind}:{conf.web_port}"
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    "web_port",
                    f"the web server cannot listen on {address}: the port is in use (another "
                    "worker on this machine?)",
                    "give each worker on a machine its own web_port (STREAMS_APP_WEB_PORT, "
                    "worker --web-port), 0 for any free port, or web_enabled=False",
                ) from None
            raise ConfigError(
                "web_bind",
                f"the web server cannot listen on {address}: {exc.strerror or exc}",
                "use an address of this machine (127.0.0.1, 0.0.0.0 for every interface)",
            ) from None
        self._runner = runner
        bound = runner.addresses[0]
        self.port = int(bound[1])
        self.url = url(advertised_host(conf.web_bind, conf.web_host), self.port)
        log.info(
            "web server on %s (listening on %s:%d): /health /ready /metrics /tables /assignment%s",
            self.url,
            conf.web_bind,
            self.port,
            f" and {len(self.worker.app.pages)} page(s)" if self.worker.app.pages else "",
        )
        return self.url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- handlers -------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        ok, body = views.health(self.worker)
        return web.json_response(body, status=200 if ok else 503)

    async def ready(self, request: web.Request) -> web.Response:
        ok, body = views.readiness(self.worker)
        return web.json_response(body, status=200 if ok else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        body = exposition.render(self.registry)
        return web.Response(body=body, headers={"Content-Type": exposition.CONTENT_TYPE})

    async def assignment(self, request: web.Request) -> web.Response:
        return web.json_response(views.assignment(self.worker))

    async def table(self, request: web.Request) -> web.Response:
        answer = queries.query_table(
            self.worker,
            request.match_info["table"],
            request.match_info["key"],
            forwarded=bool(request.query.get("forwarded")),
        )
        headers = dict(answer.headers)
        if answer.location is not None:
            headers["Location"] = answer.location + str(request.rel_url.update_query(forwarded="1"))
        return web.json_response(answer.body, status=answer.status, headers=headers)
