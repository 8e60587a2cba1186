"""ftrl: a fault-tolerant runtime for distributed reinforcement learning, without Ray."""

__version__ = "0.1.0"
