"""`ftrl evaluate` and `ftrl plot`: look at a finished (or running) run from its files.

    ftrl evaluate CHECKPOINT_OR_RUN_DIR [--episodes N] [--video DIR] [--seed S] [--explore] [--json]
    ftrl plot RUN_DIR [--out FILE]

`evaluate` loads the newest state of a run directory (or a checkpoint file) on this
machine's CPU, no cluster (`ftrl.Algorithm.from_checkpoint`), runs N episodes with the
greedy policy (`--explore`: sampled actions) and prints their return mean, min, max and
mean length; `--video DIR` writes DIR/episode_NNNN.mp4 per episode. Exit 2 when the path
holds no state or the env cannot render. `plot` writes a PNG of the run's curves
(ftrl.rl.driver.run_plot).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ftrl.wire.errors import ConfigError, NotFoundError


def add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="CHECKPOINT_OR_RUN_DIR", help="a run's output dir (its newest state) or a checkpoint")
    p.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to run (default 10)")
    p.add_argument("--video", metavar="DIR", help="write an MP4 of each episode to DIR")
    p.add_argument("--seed", type=int, metavar="S", help="seed of the first episode's reset (then S+1, ...)")
    p.add_argument("--explore", action="store_true", help="sample actions instead of the greedy ones")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ftrl.rl.driver.algorithm import Algorithm
    from ftrl.rl.driver.watch import summary, watch

    if args.episodes < 1:
        print(f"ftrl evaluate: --episodes must be at least 1, got {args.episodes}", file=sys.stderr)
        return 2
    try:
        algo = Algorithm.from_checkpoint(args.path)
    except (NotFoundError, ConfigError) as e:
        print(f"ftrl evaluate: {e}", file=sys.stderr)
        return 2
    video_dir = Path(args.video) if args.video else None

    def progress(index: int, ret: float, length: int, video: Path | None) -> None:
        if not args.json:
            where = f"  {video}" if video is not None else ""
            print(f"episode {index + 1}/{args.episodes}: return {ret:.2f}, length {length}{where}", flush=True)

    try:
        out = watch(algo, episodes=args.episodes, seed=args.seed, video_dir=video_dir, explore=args.explore,
                    on_episode=progress)
    except ConfigError as e:
        print(f"ftrl evaluate: {e}", file=sys.stderr)
        return 2
    finally:
        algo.stop()
    result: dict[str, Any] = {**summary(out["returns"], out["lengths"]), "returns": out["returns"],
                              "lengths": out["lengths"], "videos": out["videos"],
                              "checkpoint": str(algo.restored_from), "iteration": algo.iteration}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['episodes']} episodes of {algo.config.environment_cfg.env} (iteration {algo.iteration}, "
              f"{algo.restored_from}): return mean {result['episode_return_mean']:.2f}, "
              f"min {result['episode_return_min']:.2f}, max {result['episode_return_max']:.2f}, "
              f"length mean {result['episode_len_mean']:.1f}")
    return 0


def add_plot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="RUN_DIR", help="a run's output directory (its metrics.jsonl)")
    p.add_argument("--out", metavar="FILE", help="the PNG to write (default RUN_DIR/curves.png)")


def cmd_plot(args: argparse.Namespace) -> int:
    from ftrl.rl.driver.run_plot import plot_run

    run_dir = Path(args.path)
    if not (run_dir / "metrics.jsonl").exists():
        print(f"ftrl plot: no metrics.jsonl in {run_dir} (give a run's output directory)", file=sys.stderr)
        return 2
    try:
        out = plot_run(run_dir, Path(args.out) if args.out else run_dir / "curves.png")
    except ImportError as e:
        print(f"ftrl plot: {e}: pip install 'ftrl[plot]'", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"ftrl plot: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0
