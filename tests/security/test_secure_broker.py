"""TLS, SASL and ACLs against the real broker (one secured node for the session).

What an operator meets first: a worker that runs exactly-once over SASL_SSL, a wrong password
named as such (with the user, never the password), a TLS or SASL client pointed at a PLAINTEXT
listener told so, and a missing ACL named with the principal.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from streams_app import (
    App,
    AuthorizationError,
    BrokerAuthenticationError,
    BrokerSecurityMismatch,
)
from streams_app.broker.security import Acl, Operation, Pattern, Resource
from streams_app.broker.tls import make_tls_files
from streams_app.readback import read_topics
from streams_app.testing.secure import SecureKafka
from streams_app.transport.base import TopicSpec
from tests.runtime.helpers import running_worker, wait_until
from tests.runtime.test_count_basic import count_app

pytestmark = pytest.mark.kafka


async def test_worker_runs_exactly_once_over_sasl_ssl(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path
) -> None:
    settings = secure_kafka.sasl_settings("alice", "SCRAM-SHA-512")
    app = count_app(
        unique, settings["broker"], **{k: v for k, v in settings.items() if k != "broker"}
    )
    security = app.conf.security()
    bootstrap = secure_kafka.sasl_bootstrap
    keys = [f"k{i % 11}" for i in range(300)]
    async with running_worker(app, tmp_path / "state") as worker:
        async with app.producer() as producer:
            for key in keys:
                await producer.send(f"in-{unique}", key=key, value=b"x")

        async def all_out() -> bool:
            out = await read_topics(bootstrap, [f"out-{unique}"], security=security)
            return len(out[f"out-{unique}"]) >= len(keys)

        await wait_until(all_out, timeout=120)
        assert worker.producer.transactions_committed > 0

    out = (await read_topics(bootstrap, [f"out-{unique}"], security=security))[f"out-{unique}"]
    assert len(out) == len(keys)  # read_committed: each input exactly once
    per_key: dict[str, list[int]] = {}
    for record in out:
        per_key.setdefault(record.key.decode(), []).append(json.loads(record.value))
    expected = Counter(keys)
    assert {k: v for k, v in per_key.items()} == {
        k: list(range(1, n + 1)) for k, n in expected.items()
    }


async def test_tls_client_certificate_reaches_the_ssl_listener(
    secure_kafka: SecureKafka, unique: str
) -> None:
    # The SSL listener requires a client certificate; its subject is the principal ACLs name.
    app = App(f"tls-{unique}", **secure_kafka.ssl_settings(), topic_partitions=1)
    assert app.conf.principal == secure_kafka.tls.client_principal
    admin = app.transport().admin()
    await admin.start()
    try:
        await admin.create_topics([TopicSpec(f"tls-{unique}", 1, 1)])
    finally:
        await admin.close()
    async with app.producer() as producer:
        for i in range(3):
            await producer.send(f"tls-{unique}", key=b"k", value=b"%d" % i)
    found = await read_topics(
        secure_kafka.ssl_bootstrap, [f"tls-{unique}"], security=app.conf.security()
    )
    assert [r.value for r in found[f"tls-{unique}"]] == [b"0", b"1", b"2"]  # bytes pass through


async def test_wrong_password_names_the_user_not_the_password(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path
) -> None:
    wrong = "not-the-password-" + unique
    settings = secure_kafka.sasl_settings("alice", "SCRAM-SHA-512", password=wrong)
    app = count_app(unique, settings.pop("broker"), **settings)
    with pytest.raises(BrokerAuthenticationError) as info:
        await app.worker(state_dir=tmp_path).run()
    message = str(info.value)
    assert "authentication failed for user 'alice'" in message
    assert secure_kafka.sasl_bootstrap in message
    assert wrong not in message and secure_kafka.users["alice"] not in message


async def test_wrong_plain_password_is_named_too(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path
) -> None:
    settings = secure_kafka.sasl_settings("carol", "PLAIN", password="nope")
    app = count_app(unique, settings.pop("broker"), **settings)
    with pytest.raises(BrokerAuthenticationError, match="authentication failed for user 'carol'"):
        await app.worker(state_dir=tmp_path).run()


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
async def test_secure_client_against_a_plaintext_listener_is_told_so(
    bootstrap_servers: str, unique: str, tmp_path: Path, protocol: str
) -> None:
    tls = make_tls_files(tmp_path / "tls")
    settings: dict[str, object] = {"security_protocol": protocol}
    if "SSL" in protocol:
        settings["ssl_cafile"] = str(tls.ca_cert)
    if protocol.startswith("SASL"):
        settings.update(sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p")
    app = count_app(unique, bootstrap_servers, **settings)
    with pytest.raises(BrokerSecurityMismatch) as info:
        await app.worker(state_dir=tmp_path / "state").run()
    message = str(info.value)
    assert f"the broker at {bootstrap_servers} does not speak" in message
    assert ("SSL" if "SSL" in protocol else "SASL") in message
    assert "no Kafka broker answered" not in message


async def test_plaintext_client_against_a_tls_listener_is_told_so(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path
) -> None:
    app = count_app(unique, secure_kafka.sasl_bootstrap)
    with pytest.raises(BrokerSecurityMismatch, match="expects TLS"):
        await app.worker(state_dir=tmp_path).run()


async def test_untrusted_broker_certificate_names_ssl_cafile(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path
) -> None:
    other_ca = make_tls_files(tmp_path / "other").ca_cert
    settings = secure_kafka.sasl_settings("alice")
    settings["ssl_cafile"] = str(other_ca)
    app = count_app(unique, settings.pop("broker"), **settings)
    with pytest.raises(BrokerSecurityMismatch, match="ssl_cafile"):
        await app.worker(state_dir=tmp_path / "state").run()


def _acl_case(unique: str, missing: str) -> tuple[list[Acl], str, str, str]:
    """carol's ACLs for count_app(unique) with one right left out; and what the error names."""
    carol = "User:carol"
    app_id = f"count-{unique}"
    prefixed = Pattern.PREFIXED
    topic_ops = {
        f"in-{unique}": [Operation.ALL],
        f"out-{unique}": [Operation.ALL],
        app_id: [Operation.ALL],  # changelog
    }
    group_ops = [Operation.ALL]
    txn_ops = [Operation.ALL]
    if missing == "transactional-id WRITE":
        txn_ops = [Operation.DESCRIBE]
        expected = ("WRITE", "transactional id", app_id)
    elif missing == "group READ":
        group_ops = [Operation.DESCRIBE]
        expected = ("READ", "group", app_id)
    elif missing == "topic WRITE":
        topic_ops[f"out-{unique}"] = [Operation.DESCRIBE, Operation.READ, Operation.CREATE]
        expected = ("WRITE", "topic", f"out-{unique}")
    elif missing == "topic READ":
        topic_ops[f"in-{unique}"] = [Operation.DESCRIBE, Operation.WRITE, Operation.CREATE]
        expected = ("READ", "topic", f"in-{unique}")
    else:
        assert missing == "topic CREATE"
        topic_ops[f"out-{unique}"] = [Operation.DESCRIBE, Operation.READ, Operation.WRITE]
        expected = ("CREATE", "topic", f"out-{unique}")
    acls = [
        Acl(carol, Resource.TOPIC, name, op, prefixed)
        for name, ops in topic_ops.items()
        for op in ops
    ]
    acls += [Acl(carol, Resource.GROUP, app_id, op) for op in group_ops]
    acls += [Acl(carol, Resource.TRANSACTIONAL_ID, app_id, op, prefixed) for op in txn_ops]
    return acls, *expected


@pytest.mark.parametrize(
    "missing",
    ["transactional-id WRITE", "group READ", "topic WRITE", "topic READ", "topic CREATE"],
)
async def test_missing_acl_stops_the_worker_naming_the_acl_and_the_principal(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path, missing: str
) -> None:
    acls, operation, resource, name = _acl_case(unique, missing)
    await secure_kafka.grant(acls)
    alice = secure_kafka.sasl_settings("alice")
    feeder = count_app(unique, alice.pop("broker"), **alice)
    if missing != "topic CREATE":
        # The topics exist (created by alice) and hold input, so every right gets exercised.
        async with running_worker(feeder, tmp_path / "alice"):
            pass
        async with feeder.producer() as producer:
            for i in range(5):
                await producer.send(f"in-{unique}", key=f"k{i}", value=b"x")
    settings = secure_kafka.sasl_settings("carol")
    app = count_app(unique, settings.pop("broker"), **settings)
    with pytest.raises(AuthorizationError) as info:
        await asyncio.wait_for(app.worker(state_dir=tmp_path / "carol").run(), 90)
    error = info.value
    assert (error.operation, error.resource, error.principal) == (operation, resource, "User:carol")
    assert error.name.startswith(name), error.name
    assert "User:carol" in str(error) and operation in str(error)


class _Everything(logging.Handler):
    """Formats every record of every logger, tracebacks included, as an operator's log would."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


async def test_no_secret_in_any_log_line_at_debug_level(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path
) -> None:
    # PLAIN sends the password itself in SaslAuthenticate; aiokafka logs that request at DEBUG.
    settings = secure_kafka.sasl_settings("alice", "PLAIN")
    password = settings["sasl_password"]
    app = count_app(unique, settings.pop("broker"), **settings)
    handler = _Everything()
    root = logging.getLogger()
    quiet = logging.getLogger("aiokafka")
    levels = (root.level, quiet.level)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    quiet.setLevel(logging.DEBUG)
    try:
        logging.getLogger("streams_app").debug("settings: %r", app.conf)
        async with running_worker(app, tmp_path / "state") as worker:
            async with app.producer() as producer:
                for i in range(20):
                    await producer.send(f"in-{unique}", key=f"k{i}", value=b"x")
            await wait_until(lambda: worker.records_processed >= 20, timeout=60)
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        quiet.setLevel(levels[1])
    text = "\n".join(handler.lines)
    assert len(handler.lines) > 200  # debug really was on, for every client
    assert "SaslAuthenticateRequest" in text and "(redacted)" in text
    for form in (password, repr(password.encode()), password.encode().hex()):
        assert form not in text
