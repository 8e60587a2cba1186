"""One log line per event, as key=value fields (logfmt): easy to grep, easy to parse.

`kv(event="ACTOR_RESTARTED", node="n1", actor="job/env_runner/0", incarnation=3)` gives
`event=ACTOR_RESTARTED node=n1 actor=job/env_runner/0 incarnation=3 job=job`-style text.
Coordinator events and the worker's actor lines use the same fields.
"""

from __future__ import annotations

import re

_BARE = re.compile(r"[A-Za-z0-9_.\-/:@+,]+")
_TEXT = frozenset({"reason", "message", "why"})
MAX_VALUE = 300  # a longer value (a reason) is cut, with "..." at the end


def job_of(actor: str) -> str:
    """The job of actor `actor`: its name's prefix before the first `/` ('' without one)."""
    head, sep, _ = actor.partition("/")
    return head if sep else ""


def quote(value: object, always: bool = False) -> str:
    """`value` as one field value: bare when safe (and not `always`), else double-quoted
    with \\, " and newlines escaped (a multi-line text stays on one line), cut to MAX_VALUE."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if not always and _BARE.fullmatch(text):
        return text
    if len(text) > MAX_VALUE:
        text = text[:MAX_VALUE - 3] + "..."
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{text}"'


def kv(**fields: object) -> str:
    """`key=value ...` in the given order; fields whose value is None or '' are left out;
    free text (reason, message) is always quoted."""
    return " ".join(f"{k}={quote(v, k in _TEXT)}" for k, v in fields.items() if v is not None and v != "")


def actor_fields(node: str, actor: str, incarnation: int) -> dict[str, object]:
    """The fields that name one incarnation of an actor: node, actor, incarnation, job."""
    return {"node": node, "actor": actor, "incarnation": incarnation or None, "job": job_of(actor)}
