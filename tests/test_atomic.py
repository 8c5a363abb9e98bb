"""The append-only JSON-lines files (jobs.jsonl, deadlines.jsonl, slurm/allocations.jsonl) are read while their
writers may be killed mid-append: one reader, tolerant of exactly that, serves them all."""

from __future__ import annotations

from repro.atomic import append_lines, read_records


def test_read_records_skips_a_torn_line_non_objects_and_records_missing_the_needed_field(tmp_path) -> None:
    path = tmp_path / "jobs.jsonl"
    assert read_records(path) == [] and read_records(tmp_path / "no" / "such.jsonl") == []
    with open(path, "a") as handle:
        append_lines(handle, ['{"job_id": "7", "n": 1}', "[1, 2]", '{"n": 2}', '{"job_id": "", "n": 3}'])
        handle.write('{"job_id": "9", "n"')  # the kill came mid-append
    assert [r["n"] for r in read_records(path)] == [1, 2, 3]
    assert read_records(path, needs="job_id") == [{"job_id": "7", "n": 1}]
    with open(path, "a") as handle:  # the next writer's line after the torn one is read again
        handle.write("\n")
        append_lines(handle, ['{"job_id": "10", "n": 4}'])
    assert [r["n"] for r in read_records(path, needs="job_id")] == [1, 4]
