"""Join processors: what a task does with the records of a join's inputs (docs/joins.md)."""
