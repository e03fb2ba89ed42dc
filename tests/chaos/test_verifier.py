"""The verifier is the oracle of the chaos suite: it must see every kind of mistake.

Each test writes a hand-made run of the EOS test topology straight to the real broker, correct
except for one deliberate mistake, and checks that the verifier reports that mistake under the
invariant it breaks, and that a correct run shows no violation at all.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from streams_app.chaos import invariants as inv
from streams_app.chaos.generator import Acked
from streams_app.chaos.verifier import Verification, Verifier
from tests.chaos.synthetic import Corruption, write_run


async def verify(
    bootstrap: str, unique: str, tmp_path: Path, acked: Acked | None = None, **mistakes: bool
) -> Verification:
    written = await write_run(bootstrap, unique, tmp_path, Corruption(**mistakes))
    try:
        verifier = Verifier(
            bootstrap,
            written.system,
            stores=written.stores,
            concurrent=written.concurrent,
            acked=acked,
            quiescence_timeout=1.0,
        )
        return await verifier.run()
    finally:
        for producer in written.producers:
            with contextlib.suppress(Exception):
                await producer.abort_transaction()
            await producer.stop()


def only(result: Verification, *invariants: str) -> dict[str, int]:
    """The violations outside ``invariants`` (must be none)."""
    return {k: v for k, v in result.violations.items() if v and k not in invariants}


@pytest.mark.kafka
async def test_a_correct_run_has_no_violations(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    result = await verify(bootstrap_servers, unique, tmp_path)
    assert result.total == 0, dict(result.examples)
    assert result.stats["input_records"] == 80
    assert result.stats["echo_records"] == result.stats["max_records"] == 80


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("mistake", "expected"),
    [
        ("duplicate_echo", {inv.DUPLICATES: 1}),
        ("wrong_sum", {inv.AGGREGATES: 1}),
        ("missing_cnt", {inv.AGGREGATES: 1, inv.ATOMICITY: 1}),
        ("aborted_echo", {inv.ABORTED_READS: 1}),
        ("zombie_generation", {inv.ZOMBIE_COMMITS: 5}),
        # 40 inputs in turns of 5: 8 runs of 2 ids = 6 returns in each of the 5 hop-1 outputs.
        ("ids_taking_turns", {inv.ZOMBIE_COMMITS: 30}),
        ("dirty_store", {inv.RESTORED_STATE: 1}),
        ("open_transaction", {inv.OPEN_TRANSACTIONS: 1}),
        ("short_offsets", {inv.COMMITTED_OFFSETS: 1}),
    ],
)
async def test_each_mistake_is_reported_under_its_invariant(
    bootstrap_servers: str, unique: str, tmp_path: Path, mistake: str, expected: dict[str, int]
) -> None:
    result = await verify(bootstrap_servers, unique, tmp_path, **{mistake: True})
    for invariant, count in expected.items():
        assert result.violations[invariant] == count, dict(result.examples)
    # Consequences a mistake really has elsewhere (a duplicate is also out of order in echo;
    # an uncommitted input's outputs are extra everywhere), nothing unrelated.
    allowed = {
        "duplicate_echo": {inv.ECHO},
        "short_offsets": {inv.ECHO, inv.AGGREGATES, inv.ATOMICITY, inv.FINAL_STATE},
    }.get(mistake, set())
    assert only(result, *expected, *allowed) == {}, dict(result.examples)


@pytest.mark.kafka
async def test_a_static_member_restarted_on_a_new_state_dir_is_a_hand_over_not_a_zombie(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """Same generation, a second transactional id from one input offset on, never the first
    again: what a static member's restart after ``state_wipe`` commits (the 10M run's 24
    "zombie commits"). Taking turns is still caught (the parametrised case above)."""
    result = await verify(bootstrap_servers, unique, tmp_path, static_handover=True)
    assert result.total == 0, dict(result.examples)
    assert result.stats["echo_records"] == 80


@pytest.mark.kafka
async def test_an_acknowledged_input_missing_from_the_topic_is_reported(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """What the brokers acknowledged to the generator must be in the input topic: one record
    acknowledged at an offset the topic never reached is a lost write."""
    acked = Acked()
    acked.add(0, 1_000_000, 7, 7)
    result = await verify(bootstrap_servers, unique, tmp_path, acked=acked)
    assert result.violations[inv.LOST_ACKED] == 1, dict(result.examples)
    assert only(result, inv.LOST_ACKED) == {}, dict(result.examples)
