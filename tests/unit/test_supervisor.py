"""The ``worker --processes N`` supervisor's own logic, on stand-in child processes.

Each child here is a small Python process (not a worker: no broker is involved), so that what
the supervisor does with processes can be watched exactly: the per-child plan, restarts with
backoff, giving up on a child that keeps dying, signals passed on once, the metrics merge.
The real-broker case (a worker child SIGKILLed under load, exactly-once output) is
tests/runtime/test_processes.py.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams_app.cli.supervisor import (
    ChildSpec,
    RestartPolicy,
    Supervisor,
    child_command_line,
    parse_processes,
    plan_children,
)
from streams_app.cli.supervisor_web import merge_metrics
from streams_app.errors import ConfigError

FAST = RestartPolicy(backoff=0.05, backoff_max=0.2, stable_after=30.0, max_exits=3)


def specs(n: int, tmp_path: Path) -> list[ChildSpec]:
    return plan_children(
        n, state_dir=tmp_path, web_enabled=False, web_port=6066, group_instance_id=None
    )


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_each_child_gets_its_own_state_dir_web_port_and_static_member_id(tmp_path: Path) -> None:
    plan = plan_children(
        3, state_dir=tmp_path, web_enabled=True, web_port=6066, group_instance_id="pod-7"
    )
    assert [c.state_dir for c in plan] == [tmp_path / f"process-{i}" for i in range(3)]
    assert [c.web_port for c in plan] == [6067, 6068, 6069]  # the supervisor serves 6066
    assert [c.group_instance_id for c in plan] == ["pod-7-0", "pod-7-1", "pod-7-2"]
    anywhere = plan_children(
        2, state_dir=tmp_path, web_enabled=True, web_port=0, group_instance_id=None
    )
    assert [c.web_port for c in anywhere] == [0, 0]
    assert [c.group_instance_id for c in anywhere] == [None, None]
    off = plan_children(
        2, state_dir=tmp_path, web_enabled=False, web_port=0, group_instance_id=None
    )
    assert [c.web_port for c in off] == [None, None]


def test_processes_option() -> None:
    assert parse_processes("3") == 3
    assert parse_processes("auto") >= 1
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ConfigError, match="processes"):
            parse_processes(bad)


def test_child_command_line_drops_processes_and_ends_with_the_childs_options(
    tmp_path: Path,
) -> None:
    spec = ChildSpec(1, tmp_path / "process-1", 6068, None)
    argv = [
        "-A",
        "topologies.count",
        "worker",
        "--processes",
        "2",
        "--state-dir",
        "s",
        "-l",
        "info",
    ]
    cmd = child_command_line(argv, module_cli=True, spec=spec, port=6068)
    assert cmd[:3] == [sys.executable, "-m", "streams_app"]
    assert cmd[3:] == [
        "-A",
        "topologies.count",
        "worker",
        "--state-dir",
        "s",
        "-l",
        "info",
        # Last, so that they win over the supervisor's own --state-dir / --web-port.
        "--state-dir",
        str(tmp_path / "process-1"),
        "--process-index",
        "1",
        "--web-port",
        "6068",
    ]
    other = child_command_line(
        ["worker", "--processes=auto", "-W", "apps", "--without-web"],
        module_cli=True,
        spec=spec,
        port=None,
    )
    # The children start in the directory the supervisor changed to.
    assert other[3:6] == ["worker", "--without-web", "--state-dir"]
    assert "--web-port" not in other


async def test_a_child_that_dies_is_restarted_and_the_others_are_left_alone(
    tmp_path: Path,
) -> None:
    """Child 0 exits with status 3 on its first start and runs on its second; child 1 runs
    throughout. A SIGTERM-like stop then ends both cleanly: exit status 0."""
    marker = tmp_path / "started-once"
    code = (
        "import pathlib, signal, sys, time\n"
        f"m = pathlib.Path({str(marker)!r})\n"
        "if sys.argv[1] == '0' and not m.exists():\n"
        "    m.touch(); sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        f"pathlib.Path({str(tmp_path)!r} + '/up-' + sys.argv[1]).touch()\n"
        "time.sleep(60)\n"
    )
    supervisor = Supervisor(
        specs(2, tmp_path),
        lambda spec, port: [*python(code), str(spec.index)],
        policy=FAST,
    )
    running = asyncio.create_task(supervisor.run(handle_signals=False))

    async def settled() -> None:
        while not all((tmp_path / f"up-{i}").exists() for i in range(2)):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(settled(), 30)
    first, second = supervisor.children
    assert (first.starts, first.restarts, second.starts) == (2, 1, 1)
    described = supervisor.describe()
    assert [d["state"] for d in described] == ["running", "running"]
    assert described[0]["last_exit_code"] == 3
    supervisor.request_stop()
    assert await asyncio.wait_for(running, 30) == 0
    assert [c.last_exit for c in supervisor.children] == [0, 0]
    assert [d["state"] for d in supervisor.describe()] == ["stopped", "stopped"]


async def test_a_child_that_keeps_dying_makes_the_supervisor_give_up(tmp_path: Path) -> None:
    ready = tmp_path / "healthy-child-ready"
    code = (
        "import pathlib, signal, sys, time\n"
        f"ready = pathlib.Path({str(ready)!r})\n"
        "if sys.argv[1] == '1':\n"
        "    while not ready.exists(): time.sleep(0.01)\n"
        "    sys.exit(2)\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "ready.touch()\n"
        "time.sleep(60)\n"
    )
    supervisor = Supervisor(
        specs(2, tmp_path), lambda spec, port: [*python(code), str(spec.index)], policy=FAST
    )
    assert await asyncio.wait_for(supervisor.run(handle_signals=False), 30) == 1
    assert supervisor.gave_up is not None
    assert "process 1 exited 3 times in a row" in supervisor.gave_up
    assert "exit status 2" in supervisor.gave_up
    healthy, dying = supervisor.children
    assert dying.starts == FAST.max_exits
    assert healthy.starts == 1 and healthy.last_exit == 0  # stopped cleanly, not killed


def test_backoff_doubles_up_to_its_bound() -> None:
    policy = RestartPolicy(backoff=1.0, backoff_max=30.0)
    assert [policy.delay(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


async def test_signals_reach_each_child_once_then_again_then_kill(tmp_path: Path) -> None:
    """The first SIGTERM/SIGINT: every child gets one SIGTERM (its graceful stop); a child that
    ignores it gets another on the second signal, and SIGKILL on the third."""
    log = tmp_path / "signals"
    code = (
        "import signal, sys, time\n"
        f"def note(*a): open({str(log)!r} + sys.argv[1], 'a').write('T')\n"
        "signal.signal(signal.SIGTERM, note)\n"
        "print('up', flush=True)\n"
        "while True: time.sleep(0.01)\n"
    )
    supervisor = Supervisor(
        specs(2, tmp_path), lambda spec, port: [*python(code), str(spec.index)], policy=FAST
    )
    running = asyncio.create_task(supervisor.run(handle_signals=False))
    while not all(c.running for c in supervisor.children):
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)  # each child has installed its handler ("up")

    def notes() -> list[str]:
        return [
            (tmp_path / f"signals{i}").read_text() if (tmp_path / f"signals{i}").exists() else ""
            for i in range(2)
        ]

    async def until(wanted: list[str]) -> None:
        while notes() != wanted:
            await asyncio.sleep(0.02)

    supervisor.on_signal(signal.SIGINT)
    await asyncio.wait_for(until(["T", "T"]), 10)
    supervisor.on_signal(signal.SIGTERM)
    await asyncio.wait_for(until(["TT", "TT"]), 10)
    assert not running.done()
    supervisor.on_signal(signal.SIGTERM)
    assert await asyncio.wait_for(running, 10) == 130
    assert [c.last_exit for c in supervisor.children] == [-signal.SIGKILL, -signal.SIGKILL]


def test_metrics_of_every_child_in_one_exposition(tmp_path: Path) -> None:
    child = (
        "# HELP streams_app_records_processed_total Input records processed.\n"
        "# TYPE streams_app_records_processed_total counter\n"
        'streams_app_records_processed_total{app="count"} %d\n'
        "# HELP streams_app_ready 1 when ready.\n"
        "# TYPE streams_app_ready gauge\n"
        'streams_app_ready{app="count"} 1\n'
    )
    supervisor = Supervisor(specs(3, tmp_path), lambda spec, port: [])
    text = merge_metrics({0: child % 10, 2: child % 32}, supervisor).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    processed = families["streams_app_records_processed"]
    assert processed.type == "counter"
    assert {
        (s.labels["process"], s.value) for s in processed.samples if s.name.endswith("_total")
    } == {
        ("0", 10.0),
        ("2", 32.0),
    }
    assert text.count("# TYPE streams_app_records_processed_total counter") == 1  # one family
    scraped = families["streams_app_supervisor_process_scraped"]
    assert {s.labels["process"]: s.value for s in scraped.samples} == {"0": 1, "1": 0, "2": 1}
    assert families["streams_app_supervisor_processes"].samples[0].value == 3
