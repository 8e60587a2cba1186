"""The RL room: env runners, PPO learner, Algorithm driver, checkpoints and metrics.

Import submodules directly (`ftrl.rl.env_runner`, `ftrl.rl.algorithm`, ...); this
package imports nothing heavy by itself so sub-env child processes start fast.
"""
