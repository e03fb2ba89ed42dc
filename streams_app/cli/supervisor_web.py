"""The supervisor's web server (``worker --processes N``): every child on one port.

A process manager, a load balancer or Prometheus that knew one worker per container keeps one
address: the supervisor serves ``web_port`` and answers for all of its children, each of which
runs its own web server on ``web_port + 1 + i`` (:mod:`streams_app.cli.supervisor`).

==========================  ===============================================================
``GET /``                   the children: state, pid, starts, restarts, last exit, web port
``GET /health``             200 while the supervisor keeps its children running (a child
                            waiting to be restarted included); 503 once it stops or gave up
``GET /ready``              200 when every child's ``/ready`` is 200, else 503 with each
                            child's answer
``GET /metrics``            every child's metrics, each series labelled ``process="<i>"``,
                            and the supervisor's own (children running, restarts)
``GET /assignment``         every child's ``/assignment``, by process
``GET /tables/NAME/KEY``    a redirect to a running child, which answers or redirects to the
                            worker owning the key
==========================  ===============================================================
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from streams_app.cli.supervisor import Child, Supervisor
from streams_app.errors import ConfigError
from streams_app.runtime.web.server import url

log = logging.getLogger("streams_app.supervisor")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Seconds the supervisor waits for a child's answer before counting it out.
CHILD_TIMEOUT = 5.0
PREFIX = "streams_app_"


def merge_metrics(texts: dict[int, str], supervisor: Supervisor | None = None) -> bytes:
    """The children's Prometheus expositions as one: each family once, each of its samples
    labelled with the child it came from (``process``), then the supervisor's own families."""
    merged: dict[str, Metric] = {}
    for index, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(family.name, family.documentation, family.type)
                into.unit = family.unit
            for sample in family.samples:
                labels = {"process": str(index), **sample.labels}
                into.samples.append(sample._replace(labels=labels))
    families: list[Metric] = list(merged.values())
    if supervisor is not None:
        families += supervisor_families(supervisor, scraped=set(texts))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return generate_latest(registry)


def supervisor_families(supervisor: Supervisor, scraped: Iterable[int] = ()) -> list[Metric]:
    scraped = set(scraped)
    running = GaugeMetricFamily(
        PREFIX + "supervisor_process_running",
        "1 while the supervisor's worker process runs (0: waiting to restart, or stopped).",
        labels=["process"],
    )
    # A gauge, not a counter: it starts again at 0 with the supervisor, and Prometheus counters
    # need a monotonic series per process label (a restarted supervisor is a new series anyway).
    restarts = GaugeMetricFamily(
        PREFIX + "supervisor_process_restarts",
        "Times the supervisor started this worker process again after it exited.",
        labels=["process"],
    )
    up = GaugeMetricFamily(
        PREFIX + "supervisor_process_scraped",
        "1 if this worker process answered the supervisor's /metrics scrape.",
        labels=["process"],
    )
    for child in supervisor.children:
        label = [str(child.index)]
        running.add_metric(label, 1 if child.running else 0)
        restarts.add_metric(label, child.restarts)
        up.add_metric(label, 1 if child.index in scraped else 0)
    total = GaugeMetricFamily(
        PREFIX + "supervisor_processes", "Worker processes the supervisor runs (--processes)."
    )
    total.add_metric([], len(supervisor.children))
    return [total, running, restarts, up]


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def child_url(bind: str, port: int) -> str:
    host = "127.0.0.1" if bind in ("", "0.0.0.0", "*") else "::1" if bind == "::" else bind
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class SupervisorWeb:
    def __init__(
        self, supervisor: Supervisor, *, app_id: str, bind: str, port: int, host: str
    ) -> None:
        self.supervisor = supervisor
        self.app_id = app_id
        self.bind = bind
        self.port = port
        #: The host clients reach this machine at (``web_host``): where /tables redirects.
        self.host = host
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self.index)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/assignment", self.assignment)
        app.router.add_get("/tables/{table}/{key:.+}", self.table)
        return app

    async def start(self) -> None:
        runner = web.AppRunner(self.application(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.bind, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(
                "web_port",
                f"the supervisor's web server cannot listen on {self.bind}:{self.port}: "
                f"{exc.strerror or exc}",
                "give the supervisor a free web_port (its children use the next N ports), 0 "
                "for any free ports, or web_enabled=False",
            ) from None
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CHILD_TIMEOUT))
        log.info(
            "supervisor serving %s for every worker process: / /health /ready /metrics "
            "/assignment /tables",
            url(self.host, self.port),
        )

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # -- asking the children ---------------------------------------------------------------

    def _reachable(self) -> list[Child]:
        return [c for c in self.supervisor.children if c.running and c.port is not None]

    async def _ask(self, child: Child, path: str) -> tuple[int, Any] | None:
        """(status, body) of a child's GET ``path`` (JSON, or text for /metrics); None if it
        does not answer."""
        assert self._session is not None and child.port is not None
        try:
            async with self._session.get(child_url(self.bind, child.port) + path) as answer:
                if path == "/metrics":
                    return answer.status, await answer.text()
                return answer.status, await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.debug("worker process %d did not answer %s: %r", child.index, path, exc)
            return None

    async def _ask_all(self, path: str) -> dict[int, tuple[int, Any] | None]:
        children = self._reachable()
        answers = await asyncio.gather(*(self._ask(c, path) for c in children))
        return {c.index: a for c, a in zip(children, answers, strict=True)}

    # -- handlers ----------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "app": self.app_id,
                "processes": len(self.supervisor.children),
                "children": self.supervisor.describe(),
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        supervisor = self.supervisor
        states = {str(c.index): c.state() for c in supervisor.children}
        if supervisor.gave_up is not None:
            body = {"status": "failed", "error": supervisor.gave_up, "processes": states}
            return web.json_response(body, status=503)
        if supervisor.stopping:
            return web.json_response({"status": "stopped", "processes": states}, status=503)
        return web.json_response({"status": "ok", "app": self.app_id, "processes": states})

    async def ready(self, request: web.Request) -> web.Response:
        answers = await self._ask_all("/ready")
        processes: dict[str, Any] = {}
        ready = not self.supervisor.stopping
        for child in self.supervisor.children:
            answer = answers.get(child.index)
            if answer is None:
                ready = False
                processes[str(child.index)] = {"ready": False, "reason": child.state()}
            else:
                ready = ready and answer[0] == 200
                processes[str(child.index)] = answer[1]
        return web.json_response(
            {"ready": ready, "processes": processes}, status=200 if ready else 503
        )

    async def metrics(self, request: web.Request) -> web.Response:
        answers = await self._ask_all("/metrics")
        texts = {i: a[1] for i, a in answers.items() if a is not None and a[0] == 200}
        body = merge_metrics(texts, self.supervisor)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def assignment(self, request: web.Request) -> web.Response:
        answers = await self._ask_all("/assignment")
        return web.json_response(
            {str(i): (a[1] if a is not None else None) for i, a in sorted(answers.items())}
        )

    async def table(self, request: web.Request) -> web.Response:
        children = self._reachable()
        if not children:
            return web.json_response({"error": "no worker process is running"}, status=503)
        assert children[0].port is not None
        location = url(self.host, children[0].port) + str(request.rel_url)
        raise web.HTTPTemporaryRedirect(location)
