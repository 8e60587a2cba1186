"""Launch helpers: systemd units and SLURM batch jobs, one place that turns options into arguments."""
