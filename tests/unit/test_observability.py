"""Unit tests of our own logic behind the web server and progress lines (no broker needed):
the assignor's address map, histograms, the progress reporters' lines, the web settings, and
a port already in use stopping the worker with a ConfigError."""

from __future__ import annotations

import io
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from streams_app import App
from streams_app.errors import ConfigError
from streams_app.kafka.assignor import (
    AddressRangeAssignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from streams_app.runtime.metrics import Histogram, WorkerMetrics
from streams_app.runtime.progress import CatchUpMonitor, RestoreProgress
from streams_app.settings import Settings
from streams_app.transport.base import TopicPartition


class Cluster:
    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.partitions.get(topic)
        return set(range(count)) if count is not None else None


def test_assignor_distributes_every_members_address_with_the_range_assignment() -> None:
    a = AddressRangeAssignor("http://a:6066")
    b = AddressRangeAssignor("http://b:6066")
    old = AddressRangeAssignor(None)  # an older worker: publishes nothing
    members = {
        "m-a": a.metadata(["orders", "refunds"]),
        "m-b": b.metadata(["orders", "refunds"]),
        "m-old": old.metadata(["orders", "refunds"]),
    }
    assignments = a.assign(Cluster({"orders": 6, "refunds": 6}), members)  # type: ignore[arg-type]
    # The partitions are the range assignor's, unchanged.
    assert sorted(assignments["m-a"].assignment) == [("orders", [0, 1]), ("refunds", [0, 1])]
    assert sorted(assignments["m-old"].assignment) == [("orders", [4, 5]), ("refunds", [4, 5])]
    for member in (a, b, old):
        member.on_assignment(assignments["m-a"])
        assert member.hosts == {
            **{(t, p): "http://a:6066" for t in ("orders", "refunds") for p in (0, 1)},
            **{(t, p): "http://b:6066" for t in ("orders", "refunds") for p in (2, 3)},
        }
    assert assignments["m-a"].user_data == assignments["m-old"].user_data


def test_assignor_user_data_round_trips_and_ignores_foreign_bytes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert decode_subscription(encode_subscription("http://h:1")) == "http://h:1"
    assert encode_subscription(None) == b"" and decode_subscription(b"") is None
    assert decode_subscription(b"\x00\x01 another client's assignor data") is None
    hosts = {"http://h:1": {"t": [0, 2]}, "http://g:2": {"t": [1]}}
    assert decode_assignment(encode_assignment(hosts)) == {
        ("t", 0): "http://h:1",
        ("t", 2): "http://h:1",
        ("t", 1): "http://g:2",
    }
    assert decode_assignment(b"S1{broken") == {}
    assert "undecodable assignor user data" in caplog.text
    metadata = AddressRangeAssignor("http://x:9").metadata(["t"])
    decoded = ConsumerProtocolMemberMetadata.decode(metadata.encode())
    assert decode_subscription(decoded.user_data) == "http://x:9"


def test_histogram_counts_into_le_buckets() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):
        histogram.observe(value)
    assert histogram.cumulative() == [(0.1, 2), (1.0, 4), (float("inf"), 5)]
    assert histogram.count == 5 and histogram.sum == pytest.approx(8.65)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_restore_progress_lines_rate_eta_and_summary(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="streams_app.runtime.progress")
    clock = FakeClock()
    metrics = WorkerMetrics()
    progress = RestoreProgress(metrics, 5.0, clock=clock)
    a, b = TopicPartition("c", 0), TopicPartition("c", 1)
    progress.begin()
    progress(a, 0, 1000)  # the starts
    progress(b, 500, 1500)
    clock.now += 2
    progress(a, 400, 1000)  # within the interval: no line
    assert "restoring" not in caplog.text
    assert metrics.restoring[a].remaining == 600
    clock.now += 3
    progress(b, 900, 1500)
    clock.now += 5
    progress(a, 1000, 1000)
    progress(b, 1500, 1500)
    progress.end()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "restoring 2 changelog partition(s): 800 of 2,000 records (40%), 160 records/s, ETA 7.5s",
        "restoring 2 changelog partition(s): 1,400 of 2,000 records (70%), 120 records/s, ETA 5.0s",
        "restored 2,000 records of 2 changelog partition(s) in 10s (200 records/s)",
    ]
    assert metrics.restored_records == {"c": 2000} and metrics.restoring == {}


def test_catch_up_monitor_reports_after_an_assignment_until_within_a_fetch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="streams_app.runtime.progress")
    clock = FakeClock()
    state: dict[str, Any] = {"lag": None, "processed": 0, "assignments": 0}
    monitor = CatchUpMonitor(
        lambda: None if state["lag"] is None else (state["lag"], 4),
        lambda: state["processed"],
        lambda: state["assignments"],
        interval=5.0,
        threshold=100,
        clock=clock,
    )
    monitor.tick()  # no assignment yet
    state.update(assignments=1)
    monitor.tick()  # lag unknown (restoring): waits
    state.update(lag=10_000)
    monitor.tick()
    for step in range(1, 5):
        clock.now += 2.5
        state.update(lag=10_000 - 2000 * step, processed=2500 * step)
        monitor.tick()
    clock.now += 2.5
    state.update(lag=50, processed=12_500)
    monitor.tick()
    monitor.tick()  # nothing more once caught up, until the next assignment
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "catching up: 10,000 records behind on 4 partition(s)",
        "catching up: 6,000 records behind on 4 partition(s), 1,000 records/s, ETA 7.5s",
        "catching up: 2,000 records behind on 4 partition(s), 1,000 records/s, ETA 2.5s",
        "caught up: 12,500 records processed in 12s (1,000 records/s); 50 behind",
    ]
    state.update(assignments=2, lag=20)  # a new assignment with no backlog: silent
    monitor.tick()
    assert len(caplog.records) == 4


@pytest.mark.parametrize(
    ("settings", "name"),
    [
        ({"web_port": 70000}, "web_port"),
        ({"web_port": -1}, "web_port"),
        ({"web_port": "6066"}, "web_port"),
        ({"web_bind": "local host"}, "web_bind"),
        ({"web_host": "http://x"}, "web_host"),
        ({"web_enabled": "yes"}, "web_enabled"),
        ({"progress_interval": 0}, "progress_interval"),
    ],
)
def test_web_settings_are_checked(settings: dict[str, Any], name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.build("app", settings, environ={})
    assert caught.value.setting == name


def test_web_settings_defaults_and_environment() -> None:
    conf = Settings.build("app", {}, environ={})
    assert (conf.web_enabled, conf.web_bind, conf.web_port, conf.web_host) == (
        True,
        "127.0.0.1",
        6066,
        None,
    )
    env = {"STREAMS_APP_WEB_PORT": "0", "STREAMS_APP_WEB_ENABLED": "off"}
    conf = Settings.build("app", {}, environ=env)
    assert (conf.web_port, conf.web_enabled) == (0, False)


async def test_a_port_in_use_stops_the_worker_before_it_touches_kafka(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        # No broker listens on port 1: the web server must fail first, naming its setting.
        app = App("busy", broker="kafka://127.0.0.1:1")
        app.topic("in")
        with pytest.raises(ConfigError) as caught:  # (an override: the test env sets port 0)
            await app.worker(state_dir=tmp_path, web_port=port).run()
        assert caught.value.setting == "web_port"
        assert f"127.0.0.1:{port}" in str(caught.value) and "in use" in str(caught.value)
    finally:
        taken.close()


def test_page_paths_are_declared_in_the_app_layer() -> None:
    app = App("pages")

    @app.page("/hello/{name}")
    async def hello(web: Any, request: Any, name: str) -> Any:
        return web.text(f"hello {name}")

    assert [(p.path, p.view) for p in app.pages] == [("/hello/{name}", hello)]
    with pytest.raises(ValueError, match="must start with '/'"):
        app.page("hello")


def test_a_terminal_gets_a_live_bar_instead_of_periodic_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="streams_app.runtime.progress")
    clock = FakeClock()
    terminal = io.StringIO()
    progress = RestoreProgress(WorkerMetrics(), 5.0, stream=terminal, clock=clock)
    tp = TopicPartition("c", 0)
    progress.begin()
    progress(tp, 0, 1000)
    for position in (250, 500, 750):
        clock.now += 5  # an interval each: lines would be due
        progress(tp, position, 1000)
    drawn = terminal.getvalue()
    assert "\r\x1b[Krestoring [##################------]  75% 750/1,000 records" in drawn
    assert "ETA 5.0s" in drawn  # 250 left at 50 records/s
    clock.now += 5
    progress(tp, 1000, 1000)
    progress.end()
    assert terminal.getvalue().endswith("\r\x1b[K")  # the bar is wiped before the summary
    assert [r.getMessage() for r in caplog.records] == [
        "restored 1,000 records of 1 changelog partition(s) in 20s (50 records/s)"
    ]
