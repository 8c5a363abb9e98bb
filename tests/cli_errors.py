"""The shape of a user-facing failure: exit code 2 and exactly one `error:` line on stderr, no traceback."""

from __future__ import annotations


def one_error(code: int, err: str) -> str:
    """The one error line (asserting the shape first)."""
    assert code == 2, err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]
