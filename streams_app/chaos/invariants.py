"""The twelve invariants of exactly-once (design brief, section 5), by the key results use."""

from __future__ import annotations

OPEN_TRANSACTIONS = "1_open_transactions"
COMMITTED_OFFSETS = "2_committed_offsets"
ECHO = "3_echo"
AGGREGATES = "4_aggregates"
FINAL_STATE = "5_final_state"
ABORTED_READS = "6_aborted_reads"
DUPLICATES = "7_duplicates"
ATOMICITY = "8_atomicity"
ZOMBIE_COMMITS = "9_zombie_commits"
RESTORED_STATE = "10_restored_state"
CLIENT_TRANSACTIONS = "11_client_transactions"
LIVENESS = "12_liveness"

INVARIANTS: dict[str, str] = {
    OPEN_TRANSACTIONS: "no open transactions remain (last stable offset = high watermark)",
    COMMITTED_OFFSETS: "the committed input offsets equal the input end offsets",
    ECHO: "echo[p] (and the repartition topic) equals input[p], in order, nothing extra",
    AGGREGATES: "sum/min/cnt/max: one record per input, each the correct running value",
    FINAL_STATE: "the final table state (changelog) equals the final aggregate",
    ABORTED_READS: "a read_committed reader running during the faults saw only committed records",
    DUPLICATES: "no (source partition, source offset) appears twice in any output",
    ATOMICITY: "each input's echo, aggregates, repartition record and changelog: all or none",
    ZOMBIE_COMMITS: (
        "no fenced zombie got anything committed (generations monotone per input, "
        "one transactional id at a time per generation)"
    ),
    RESTORED_STATE: "local stores hold exactly the committed changelog (up to their offset)",
    CLIENT_TRANSACTIONS: "client layer alone: no lost write, duplicate, aborted read, bad offset",
    LIVENESS: "processing resumes within session + transaction timeout + restore time",
}


def short(name: str) -> str:
    """``"7_duplicates"`` -> ``"7 duplicates"`` (table headings)."""
    number, _, rest = name.partition("_")
    return f"{number} {rest.replace('_', ' ')}"


#: What network partitions add to the twelve (issue 38), checked beside them.
LOST_ACKED = "lost_acked_inputs"
HANGING_AFTER_HEAL = "hanging_after_heal"
WORKERS_AFTER_HEAL = "workers_after_heal"

PARTITION_CHECKS: dict[str, str] = {
    LOST_ACKED: "every input the brokers acknowledged to the generator is in the topic",
    HANGING_AFTER_HEAL: "no transaction hanging or overdue after a network fault healed "
    "(streams-app txn hanging's verdicts)",
    WORKERS_AFTER_HEAL: "after each heal every worker processes again or stopped with a "
    "clear message (faults)",
}

#: Every check a result reports: the twelve invariants, then the partition checks.
CHECKS: dict[str, str] = {**INVARIANTS, **PARTITION_CHECKS}


def label(name: str) -> str:
    """A check's heading in the summary table."""
    if name in PARTITION_CHECKS:
        return "+ " + name.replace("_", " ")
    return short(name)
