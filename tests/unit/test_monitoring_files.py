"""The monitoring files users run without us: docker-compose.yml, the Prometheus config and
alert rules, the Grafana dashboard and provisioning.

No Docker engine runs here, so these check what a wrong edit would break: the YAML parses, the
compose file is shaped as the Compose specification requires (services with an image, ports
and volumes as strings, depends_on naming services, named volumes declared, mounted files
present, the monitoring services in their optional profile and nothing unprofiled depending on
them), every PromQL expression parses (promql-parser, the Prometheus parser's Rust port), and
every ``streams_app_*`` series a dashboard panel or an alert reads is one the worker's
``/metrics`` exports: a renamed metric would otherwise leave an empty panel or an alert that
never fires.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from streams_app import App
from streams_app.runtime.web.exposition import render, worker_registry
from streams_app.runtime.worker import Worker

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "docs" / "monitoring"
SERIES = re.compile(r"\b(?:streams_app|process)_[a-z_]+\b")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def compose() -> dict[str, Any]:
    data = load_yaml(ROOT / "docker-compose.yml")
    assert isinstance(data, dict)
    return data


def exported_series() -> set[str]:
    """Every series name a worker's /metrics can carry (counters as ``_total``, histograms as
    ``_bucket``/``_sum``/``_count``), read from the real exposition of an unstarted worker."""
    app = App("monitoring-files", broker="127.0.0.1:1")
    app.Table("per-minute", default=int).tumbling(60)
    text = render(worker_registry(Worker(app))).decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


def dashboard_exprs() -> Iterator[tuple[str, str]]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            yield variable["name"], query if isinstance(query, str) else query["query"]


def alert_exprs() -> Iterator[tuple[str, str]]:
    for group in load_yaml(MONITORING / "alerts.yml")["groups"]:
        for rule in group["rules"]:
            yield rule["alert"], rule["expr"]


def test_compose_file_is_shaped_as_the_compose_specification_requires() -> None:
    data = compose()
    assert set(data) <= {"name", "services", "volumes", "networks", "configs", "secrets"}
    services: dict[str, dict[str, Any]] = data["services"]
    volumes = set(data.get("volumes") or {})
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        for port in service.get("ports", []):
            assert isinstance(port, str) and re.fullmatch(r"127\.0\.0\.1:\d+:\d+", port), (
                f"{name}: ports as quoted strings, published on 127.0.0.1 only: {port!r}"
            )
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which is missing"
            else:
                assert source in volumes, f"{name}: named volume {source} is not declared"
        for key, value in (service.get("environment") or {}).items():
            assert isinstance(value, str | int), f"{name}: {key} must be a string or number"
        depends = service.get("depends_on", [])
        for other in depends:
            assert other in services, f"{name} depends on unknown service {other}"
            if not service.get("profiles"):
                assert not services[other].get("profiles"), (
                    f"{name} (always started) depends on {other}, which is in a profile"
                )
        if isinstance(depends, dict):
            for other, condition in depends.items():
                assert condition["condition"] in {
                    "service_started",
                    "service_healthy",
                    "service_completed_successfully",
                }
                if condition["condition"] == "service_healthy":
                    assert "healthcheck" in services[other], f"{other} has no healthcheck"
    # Monitoring is optional: `docker compose up` without the profile starts neither.
    assert services["prometheus"]["profiles"] == ["monitoring"]
    assert services["grafana"]["profiles"] == ["monitoring"]


def test_prometheus_scrapes_every_worker_service_where_its_web_server_listens() -> None:
    services = compose()["services"]
    config = load_yaml(MONITORING / "prometheus.yml")
    targets = {
        t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    workers = {
        n
        for n, s in services.items()
        if re.search(r"streams-app -A \S+ worker", str(s.get("command", "")))
    }
    assert workers, "no worker service"
    assert targets == {f"{name}:6066" for name in workers}
    for name in workers:
        service = services[name]
        settings = dict(service.get("environment") or {})
        for flag, value in re.findall(r"--web-(bind|host) ([^\s\"]+)", service["command"]):
            settings[f"STREAMS_APP_WEB_{flag.upper()}"] = value
        # Bound to 127.0.0.1 inside a container, Prometheus could not reach it; the host is
        # the address other workers are redirected to.
        assert settings.get("STREAMS_APP_WEB_BIND") == "0.0.0.0", name
        assert settings.get("STREAMS_APP_WEB_HOST") == name, name
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    mounts = services["prometheus"]["volumes"]
    assert "./docs/monitoring/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts


def test_grafana_provisioning_points_at_the_mounted_dashboard() -> None:
    services = compose()["services"]
    mounts = dict(m.split(":")[:2] for m in services["grafana"]["volumes"] if m.startswith("."))
    dashboards = load_yaml(MONITORING / "grafana" / "dashboards.yml")
    folder = dashboards["providers"][0]["options"]["path"]
    assert mounts["./docs/monitoring/grafana-dashboard.json"].startswith(folder.rstrip("/") + "/")
    sources = load_yaml(MONITORING / "grafana" / "datasources.yml")["datasources"]
    assert [s["type"] for s in sources] == ["prometheus"]
    assert sources[0]["url"] == "http://prometheus:9090"


@pytest.mark.parametrize(
    "where,expr",
    [*dashboard_exprs(), *alert_exprs()],
    ids=lambda v: str(v)[:40],
)
def test_promql_parses_and_reads_only_exported_series(where: str, expr: str) -> None:
    if expr.startswith("label_values("):  # a Grafana template function around a series
        expr = expr[len("label_values(") :].rsplit(",", 1)[0].rstrip(")")
    expr = expr.replace("$__rate_interval", "5m").replace("$__range", "1h")
    expr = re.sub(r"\$\{?(\w+)\}?", "x", expr)
    promql_parser.parse(expr)  # raises on a syntax error
    unknown = set(SERIES.findall(expr)) - exported_series()
    assert not unknown, f"{where}: {sorted(unknown)} are not exported by /metrics"
