"""``broker start --port 0``: the address it prints must reach the apps, which keep the broker
they declare unless ``STREAMS_APP_BROKER`` says otherwise. The command prints the export line,
and the README and docs/operations.md say so (broker-free: the start itself is faked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_app.broker import devserver
from streams_app.cli.main import main
from streams_app.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def fake_start(port: int) -> devserver.DevBrokerState:
    chosen = port or 41395
    return devserver.DevBrokerState(4242, f"127.0.0.1:{chosen}", chosen, 41396, "c", "/tmp/x")


@pytest.mark.parametrize(("port", "hint"), [(0, True), (9092, False)])
def test_broker_start_on_another_port_prints_the_export(
    port: int, hint: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(devserver, "start", lambda port, fresh: fake_start(port))
    assert main(["broker", "start", "--port", str(port)]) == 0
    out = capsys.readouterr().out
    export = f"export STREAMS_APP_BROKER=127.0.0.1:{port or 41395}"
    assert (export in out) is hint, out


def test_the_environment_beats_the_broker_an_app_declares() -> None:
    declared = {"broker": "kafka://localhost:9092"}
    env = {"STREAMS_APP_BROKER": "127.0.0.1:41395"}
    assert Settings.build("orders", declared, environ={}).bootstrap_servers == "localhost:9092"
    assert Settings.build("orders", declared, environ=env).bootstrap_servers == "127.0.0.1:41395"


@pytest.mark.parametrize("doc", ["README.md", "docs/operations.md"])
def test_the_docs_say_to_export_the_printed_address(doc: str) -> None:
    text = (REPO / doc).read_text()
    at = text.index("broker start --port 0")
    assert "export STREAMS_APP_BROKER=" in text[at : at + 600], doc
