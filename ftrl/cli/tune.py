"""`ftrl tune`: run, resume, show and plot a tuning experiment.

    ftrl tune EXPERIMENT.toml [--coordinator HOST:PORT] [--resume] [--storage-path DIR]
    ftrl tune status DIR [--json]
    ftrl tune plot DIR [--out FILE] [--x env_steps_sampled|iteration|time_s]

EXPERIMENT.toml is a job file (algo, config tables, [stop]) plus a [tune] table
(ftrl.tune.tuner.load_experiment_file). The experiment lives in STORAGE/NAME
(experiment.json, lineage.jsonl, one folder per trial). Without --coordinator it runs on
an embedded local cluster, as `ftrl train` does. `--resume` continues an experiment
whose processes all died (coordinator included) from its experiment.json: its
scheduler state, trials and lineage; nothing is renamed by hand. Exit codes: 0 when
the experiment finished, 130 when it was stopped (Ctrl-C), 2 for bad input, 1 when it failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ftrl.wire.errors import ConfigError, FailedPreconditionError, FtrlError

SUBCOMMANDS = ("status", "plot")


def add_tune_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="EXPERIMENT.toml|status|plot",
                   help="an experiment file to run, or `status DIR` / `plot DIR`")
    p.add_argument("path", nargs="?", metavar="DIR", help="with status or plot: the experiment's directory")
    p.add_argument("--coordinator", metavar="HOST:PORT", help="run on a running cluster")
    p.add_argument("--resume", action="store_true", help="continue the experiment from its directory")
    p.add_argument("--storage-path", metavar="DIR", help="where experiments live (over [tune] storage_path)")
    p.add_argument("--json", action="store_true", help="status: print JSON")
    p.add_argument("--out", metavar="FILE", help="plot: the PNG to write (default DIR/pbt.png)")
    p.add_argument("--x", default="env_steps_sampled", help="plot: the x axis (a metrics-row key)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def cmd_tune(args: argparse.Namespace) -> int:
    if args.target in SUBCOMMANDS:
        if not args.path:
            print(f"ftrl tune {args.target}: give the experiment's directory", file=sys.stderr)
            return 2
        return _status(args) if args.target == "status" else _plot(args)
    return _run(args)


def _status(args: argparse.Namespace) -> int:
    from ftrl.tune import report

    experiment = report.read_experiment(args.path)
    lineage = report.read_lineage(args.path)
    if args.json:
        print(json.dumps(report.experiment_summary(experiment, lineage), indent=2, sort_keys=True))
    else:
        print(report.population_table(experiment, lineage))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from ftrl.tune import report

    path = report.plot_experiment(args.path, args.out, x=args.x)
    print(path)
    return 0


def _run(args: argparse.Namespace) -> int:
    from ftrl.tune import report
    from ftrl.tune.experiment import ExperimentStatus
    from ftrl.tune.tuner import RunConfig, Tuner, load_experiment_file

    path = Path(args.target)
    if not path.is_file():
        print(f"ftrl tune: {path} is not a file (an experiment TOML, or `status DIR` / `plot DIR`)",
              file=sys.stderr)
        return 2
    try:
        tuner = load_experiment_file(path, storage_path=args.storage_path)
    except ConfigError as e:
        print(f"ftrl tune: config error: {e}", file=sys.stderr)
        return 2
    if args.quiet:
        tuner.run_config = RunConfig(verbose=0)
    expdir = tuner.experiment_path
    if Tuner.can_restore(expdir):
        if not args.resume:
            print(f"ftrl tune: {expdir} already holds this experiment; pass --resume to continue it, "
                  "or give it another [tune] name", file=sys.stderr)
            return 2
        verbose = tuner.run_config.verbose
        tuner = Tuner.restore(expdir)
        tuner.run_config.verbose = verbose
        print(f"ftrl tune: resuming {expdir}", file=sys.stderr)
    elif args.resume:
        print(f"ftrl tune: nothing to resume in {expdir}; starting the experiment", file=sys.stderr)
    client: Any = None
    try:
        if args.coordinator:
            from ftrl.client.client import Client
            from ftrl.wire.security import security_from_args

            client = Client(args.coordinator, security=security_from_args(args))
            tuner.client = client
        results = tuner.fit()
    except (ConfigError, FailedPreconditionError) as e:
        print(f"ftrl tune: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ftrl tune: aborted", file=sys.stderr)
        return 130
    except FtrlError as e:
        print(f"ftrl tune: failed: {e}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()
    experiment = report.read_experiment(expdir)
    print(report.population_table(experiment, report.read_lineage(expdir)))
    print(f"experiment: {expdir}")
    if results.status == ExperimentStatus.STOPPED:
        return 130
    return 0 if results.status == ExperimentStatus.FINISHED else 1
