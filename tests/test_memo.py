"""`Memo`: the bounded per-tenant memo of the request path."""

from __future__ import annotations

from sentinel_core._memo import Memo


def test_a_memo_keeps_what_it_is_given_until_it_is_full_then_starts_again() -> None:
    memo: Memo[str, int] = Memo(2)

    assert memo.keep("a", 1) == 1
    assert memo.keep("b", 2) == 2
    assert memo == {"a": 1, "b": 2}

    assert memo.keep("c", 3) == 3  # full: emptied first, so it never holds more than 2
    assert memo == {"c": 3}
    assert memo.get("a") is None
