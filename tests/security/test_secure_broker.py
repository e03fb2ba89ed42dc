"""TLS, SASL and ACLs against the real broker (one secured node for the session).

What an operator meets first: a worker that runs exactly-once over SASL_SSL, a wrong password
named as such (with the user, never the password), a TLS or SASL client pointed at a PLAINTEXT
listener told so, and a missing ACL named with the principal.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streams_app import (
    App,
    AuthorizationError,
    BrokerAuthenticationError,
    BrokerSecurityMismatch,
)
from streams_app.broker.tls import make_tls_files
from streams_app.readback import read_topics
from streams_app.testing.secure import SecureKafka
from tests.runtime.helpers import running_worker, wait_until
from tests.runtime.test_count_basic import count_app

pytestmark = pytest.mark.kafka


async def test_worker_runs_exactly_once_over_sasl_ssl(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path
) -> None:
    settings = secure_kafka.sasl_settings("alice", "SCRAM-SHA-512")
    app = count_app(unique, settings["broker"], **{k: v for k, v in settings.items() if k != "broker"})
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
    app = App(f"tls-{unique}", **secure_kafka.ssl_settings(), topic_partitions=1)
    topic = app.topic(f"tls-{unique}", key_type=str, value_type=int)
    async with app.transport().admin() as _:  # type: ignore[attr-defined]
        pass
    assert topic


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


__all__ = ["AuthorizationError"]
