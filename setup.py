"""Builds the optional C extension `ftrl.rl.sampling._vecstep` (the EnvRunner's vector step below
Python). Everything else is in pyproject.toml. Without a C compiler the build skips it
(`optional=True`) and the runner uses its pure-Python loop, which does the same."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("ftrl.rl.sampling._vecstep", ["ftrl/rl/sampling/_vecstep.c"], extra_compile_args=["-O2"], optional=True),
    ]
)
