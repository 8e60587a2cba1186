"""Seed 002's experiment in small: a BoxWorld-like relational gridworld (`env`), a
relational model (`model`: self-attention over the cells with layer norm), a custom
metric (`callbacks`: the share of solved episodes), and the PBT experiment that ties
them (`pbt.py`)."""
