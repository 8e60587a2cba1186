"""The ftrl version, in a module of its own so reading it imports nothing else.
Keep it equal to `version` in pyproject.toml (a worker of another version is refused)."""

__version__ = "0.1.0"
