"""A user's own recurrent torch module (`model={"custom_model": "pkg.mod:Net"}`, a class
that defines `get_initial_state`), RLlib's recurrent model interface in small:

    class Net(torch.nn.Module):
        def __init__(self, obs_shape, num_outputs, **custom_model_config): ...
        def get_initial_state(self) -> list[Tensor]:
            # the state at an episode's start, each tensor WITHOUT the batch dimension
        def forward(self, obs, state, seq_lens) -> (logits, value, new_state):
            # obs [B, T, *obs_shape] (a Dict/Tuple observation: nested dicts of [B, T, ...]),
            # state: list of [B, ...] (the state before each sequence's first step),
            # seq_lens [B] int64 (steps after seq_lens[b] are padding);
            # returns logits [B, T, num_outputs], value [B, T], the state after the last step

`obs_shape` and `num_outputs` are as for a stateless custom model
(`ftrl.rl.models.custom`). On the runners `forward` runs one step of every sub-env
(T = 1). The learner cuts every column of a fragment where an episode ends: each piece
is one sequence, from the runner's state at the fragment's (or PPO's sequence's) start
or from `get_initial_state()` after an episode ended; so a state never crosses
episodes, and a module never needs to reset itself. `use_lstm` together with such a
model is a ConfigError (it would wrap one state in another); `lstm_use_prev_action` and
`lstm_use_prev_reward` too (they belong to `use_lstm`'s LSTM).

The state travels as one flat float32 row per sub-env (the tensors side by side), so
fragments, `compute_single_action` and `get_initial_state()` outside training carry it
as they carry `use_lstm`'s.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ftrl.config import ModelConfig
from ftrl.rl.models.base import action_log_std
from ftrl.rl.models.custom import checked_layout, construct_module, model_obs_shape, module_input
from ftrl.rl.models.recurrent import RecurrentBase, episode_pieces
from ftrl.rl.spaces import SpaceSpec
from ftrl.wire.errors import ConfigError


class CustomRecurrentActorCritic(RecurrentBase):
    """The user's recurrent module (`self.net`) under ftrl's recurrent model interface."""

    def __init__(self, spec: SpaceSpec, model: ModelConfig, cls: type[nn.Module]):
        super().__init__()
        path = str(model.custom_model)
        for key in ("use_lstm", "lstm_use_prev_action", "lstm_use_prev_reward"):
            if getattr(model, key):
                raise ConfigError(f"model custom_model {path!r} keeps a state of its own (get_initial_state): "
                                  f"{key}=True belongs to use_lstm's LSTM, which would wrap it; set it False")
        self.spec = spec
        self.discrete = spec.act_kind == "discrete"
        self.obs_shape = model_obs_shape(spec)
        self.net = construct_module(cls, path, spec, model)
        self.register_parameter("log_std", action_log_std(spec, model.init_log_std, model.free_log_std))
        self.layout = checked_layout(self, path)
        self.state_shapes = self._check_state(path)
        self._check_outputs(path)

    # ---- state: the module's list of tensors <-> one flat row per sub-env

    def _initial_parts(self) -> list[torch.Tensor]:
        return [torch.as_tensor(t).detach().to(torch.float32) for t in self.net.get_initial_state()]

    def _check_state(self, path: str) -> list[tuple[int, ...]]:
        try:
            parts = self._initial_parts()
        except Exception as e:
            raise ConfigError(f"model custom_model {path!r}: get_initial_state() raised {type(e).__name__}: {e} "
                              "(it must return a list of tensors, each without the batch dimension)") from None
        if not parts:
            raise ConfigError(f"model custom_model {path!r}: get_initial_state() returned no tensor; a stateless "
                              "model defines no get_initial_state (forward(obs) -> (logits, value))")
        return [tuple(t.shape) for t in parts]

    def initial_state(self, batch: int) -> torch.Tensor:
        row = torch.cat([t.reshape(-1) for t in self._initial_parts()])
        return row.expand(batch, -1).clone()

    def _split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        parts, offset = [], 0
        for shape in self.state_shapes:
            size = math.prod(shape)
            parts.append(flat[:, offset: offset + size].reshape(flat.shape[0], *shape))
            offset += size
        return parts

    @staticmethod
    def _join(parts: Any, batch: int) -> torch.Tensor:
        return torch.cat([p.reshape(batch, -1).to(torch.float32) for p in parts], dim=-1)

    # ---- the module over [N, L] sequences

    def _run(self, rows: torch.Tensor, n: int, length: int, state: torch.Tensor, seq_lens: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Logits [N * L, A] and values [N * L] of N sequences of L steps (`rows` [N * L,
        D] sequence-major, the mask still in), and the module's new state."""
        x = module_input(self.spec, self.obs_shape, self._input(rows), (n, length))
        out = self.net(x, self._split(state), seq_lens)
        if not (isinstance(out, (tuple, list)) and len(out) == 3):
            raise TypeError(f"forward returned {type(out).__name__}, not (logits, value, new_state)")
        logits, value, new_state = out
        logits = logits.reshape(n * length, -1)
        return self._masked(logits, rows), value.reshape(n * length), new_state

    def _check_outputs(self, path: str) -> None:
        """A dummy batch of 2 sequences of 3 steps: logits [2, 3, A], value [2, 3], a state of
        `get_initial_state()`'s shapes with the batch dimension."""
        act = self.spec.act_dim
        want = f"(logits [B, T, {act}], value [B, T], new_state: list of [B, *shape] for {self.state_shapes})"
        try:
            with torch.no_grad():
                x = module_input(self.spec, self.obs_shape, torch.zeros(6, self.spec.input_dim), (2, 3))
                out = self.net(x, self._split(self.initial_state(2)), torch.full((2,), 3, dtype=torch.int64))
        except Exception as e:
            raise ConfigError(f"model custom_model {path!r}: forward on 2 sequences of 3 observations of shape "
                              f"{self.obs_shape} raised {type(e).__name__}: {e} (it must return {want})") from None
        ok = isinstance(out, (tuple, list)) and len(out) == 3
        if ok:
            logits, value, new_state = out
            shapes = [tuple(getattr(s, "shape", ())) for s in (new_state if isinstance(new_state, (list, tuple)) else [])]
            ok = (isinstance(logits, torch.Tensor) and tuple(logits.shape) == (2, 3, act)
                  and isinstance(value, torch.Tensor) and tuple(value.shape) in ((2, 3), (2, 3, 1))
                  and shapes == [(2, *s) for s in self.state_shapes])
        if not ok:
            got = [tuple(getattr(o, "shape", ())) if isinstance(o, torch.Tensor) else type(o).__name__
                   for o in (out if isinstance(out, (tuple, list)) else [out])]
            raise ConfigError(f"model custom_model {path!r}: forward on 2 sequences of 3 steps returned {got}; "
                              f"it must return {want}")

    # ---- one step (runners, compute_single_action)

    def step(self, obs: torch.Tensor, state: torch.Tensor, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = obs.shape[0]
        ones = torch.ones(n, dtype=torch.int64, device=obs.device)
        out, values, new_state = self._run(obs, n, 1, state, ones)
        return out, values, self._join(new_state, n)

    # ---- whole fragments (learners): one sequence per episode piece of a column

    def evaluate_sequence(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        actions = batch["actions"]
        t_len, width = batch["rewards"].shape
        pieces = episode_pieces(batch["terminateds"] | batch["truncateds"])
        packed = pieces.pack(batch["obs"].reshape(t_len, width, -1))
        state = pieces.start_states(batch["state_in"], self.initial_state(1)[0].to(packed.device))
        out, values, _ = self._run(packed, pieces.count, pieces.longest, state, pieces.lengths)
        out, values = pieces.unpack(out), pieces.unpack(values)
        logp, entropy = self._score(out, actions.reshape((t_len * width, *actions.shape[2:])))
        return logp.reshape(t_len, width), entropy.reshape(t_len, width), values.reshape(t_len, width)
