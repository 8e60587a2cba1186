"""The one restart policy: budget, quick-crash streaks and backoff.

The coordinator decides restarts it makes itself with it, and sends its settings to
every worker at registration (RegisterNodeReply), so a worker's local restart in
place follows exactly the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftrl.util.backoff import restart_delay


@dataclass(frozen=True)
class RestartPolicy:
    """When and how soon a dead actor is started again.

    - budget: `max_restarts` (-1 unlimited, 0 never) against restarts used so far;
    - a death less than `quick_crash_s` after the incarnation started serving (or
      before it ever served) extends the crash streak, a later one starts a new streak;
    - the first crash of a streak restarts at once; the n-th (n >= 2) waits
      backoff_base_s * 2^(n-2), capped at backoff_cap_s.
    """

    backoff_base_s: float = 0.1
    backoff_cap_s: float = 2.0
    quick_crash_s: float = 1.0

    def validate(self) -> None:
        """Raise ValueError unless 0 <= base <= cap <= 3600 and 0 <= quick_crash_s <= 3600."""
        if not (0 <= self.backoff_base_s <= self.backoff_cap_s <= 3600 and 0 <= self.quick_crash_s <= 3600):
            raise ValueError(
                "need 0 <= restart_backoff_base_s <= restart_backoff_cap_s <= 3600 and "
                f"0 <= quick_crash_s <= 3600, got {self}")

    @staticmethod
    def has_budget(restarts: int, max_restarts: int) -> bool:
        """Whether one more restart is allowed after `restarts` of at most `max_restarts`."""
        return max_restarts < 0 or restarts < max_restarts

    def next_streak(self, streak: int, alive_for_s: float | None) -> int:
        """The crash streak after a death; `alive_for_s` is None if it never served."""
        quick = alive_for_s is None or alive_for_s < self.quick_crash_s
        return streak + 1 if quick else 1

    def delay(self, streak: int) -> float:
        """Seconds to wait before the restart that follows the streak's `streak`-th crash."""
        return restart_delay(streak - 1, self.backoff_base_s, self.backoff_cap_s)

    @classmethod
    def from_reply(cls, reply: object, default: RestartPolicy | None = None) -> RestartPolicy:
        """The policy a RegisterNodeReply carries (an older coordinator sends none: default)."""
        base = getattr(reply, "restart_backoff_base_s", 0.0)
        cap = getattr(reply, "restart_backoff_cap_s", 0.0)
        if cap <= 0:
            return default or cls()
        policy = cls(base, cap, getattr(reply, "quick_crash_s", 0.0))
        policy.validate()
        return policy
