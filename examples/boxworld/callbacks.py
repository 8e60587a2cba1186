"""The seed's own metric: the share of solved episodes (`custom_metrics/solved_mean`),
what PBT ranks the population by."""

from __future__ import annotations

from typing import Any

import ftrl


class SolvedShare(ftrl.Callbacks):
    """Logs 1 for an episode that took the gem, 0 for any other."""

    def on_episode_end(self, *, episode: Any, metrics_logger: Any, **kwargs: Any) -> None:
        info = episode.get_infos(-1) or {}
        metrics_logger.log_value("solved", float(info.get("solved", 0.0)))
