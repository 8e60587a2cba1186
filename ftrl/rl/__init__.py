"""The RL room: env runners, PPO learner, Algorithm driver, checkpoints and metrics.

Import submodules directly (`ftrl.rl.sampling.env_runner`, `ftrl.rl.driver.algorithm`, ...); this
package imports nothing heavy by itself so sub-env child processes start fast.
"""
