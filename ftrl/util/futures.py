"""Completing a `concurrent.futures.Future` that several paths may race to complete."""

from __future__ import annotations

import concurrent.futures as cf
from typing import Any


def settle(fut: cf.Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete `fut` with `error` (if given) or `result`, unless it is already complete
    (the first path to finish it wins: a crash, a timeout, a close)."""
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)
    except cf.InvalidStateError:
        pass
