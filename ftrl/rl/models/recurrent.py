"""An LSTM around any model (`model={"use_lstm": True, "lstm_cell_size": 256,
"lstm_use_prev_action": False, "lstm_use_prev_reward": False}`), RLlib's old stack's way:
the wrapped model's features (the fully connected body, the CNN's or a Dict's joined
features; a custom model's output, built with `num_outputs = lstm_cell_size`) feed an
LSTM cell, optionally with the previous action (one-hot per discrete leaf) and reward;
the policy and value heads read the cell's output. (The wrapped model's own heads are
built but unused: a few parameters that never get a gradient.)

The state is one float tensor per sub-env, [B, 2 * lstm_cell_size] (h then c), zero at
an episode's start. On the runners `act_step` advances it one step. The learner unrolls
a whole fragment from the state the runner had at its start (`evaluate_sequence`),
zeroing it after every step that ended an episode, as the runner did; so a state is
never carried across episodes, and a fragment that is lost takes its states with it.
It does so in one call of torch's fused LSTM over the cell's own weights: each column
is cut into its episode pieces (`episode_pieces`), and the pieces run as one padded batch.

`RecurrentBase` is what every recurrent model shares (the one-step API the runners and
`compute_single_action` use); a custom recurrent module is the other one
(`ftrl.rl.models.custom_recurrent`).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ftrl.config import ModelConfig
from ftrl.rl.models.base import FlatActorCritic, action_log_std, init_linear, named_layout
from ftrl.rl.spaces import SpaceSpec, action_slices


def prev_action_dim(spec: SpaceSpec) -> int:
    """The width of the previous action as the LSTM reads it (one-hot discrete leaves)."""
    return sum(s.hi - s.lo for s in action_slices(spec))


def encoder_of(spec: SpaceSpec, model: ModelConfig) -> tuple[SpaceSpec, ModelConfig]:
    """The spaces and model keys the wrapped model is built from: the same model without
    the LSTM, its heads one output wide (unused), but a custom model's output, which is
    the features, `lstm_cell_size` wide."""
    outputs = model.lstm_cell_size if model.custom_model else 1
    inner_spec = dataclasses.replace(spec, act_kind="discrete", act_shape=(), act_dim=outputs, act_low=(),
                                     act_high=(), act_parts=(), act_tree=None)
    return inner_spec, dataclasses.replace(model, use_lstm=False, vf_share_layers=True)


class RecurrentBase(FlatActorCritic):
    """What every recurrent model shares: the one-step API over `step` (the runners,
    `compute_single_action`), given `initial_state`, `step` and `evaluate_sequence`."""

    recurrent = True

    def initial_state(self, batch: int) -> torch.Tensor:
        """The state at an episode's start, [batch, S] (one flat row per sub-env)."""
        raise NotImplementedError

    def step(self, obs: torch.Tensor, state: torch.Tensor, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits or means, values, the next state) for one step of a batch."""
        raise NotImplementedError

    def evaluate_sequence(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs of the batch's actions, entropies and values, [T, B], unrolled from
        `state_in` over `obs` [T, B, D]; after a step that ended an episode (terminated
        or truncated) the state starts again from `initial_state`."""
        raise NotImplementedError

    def act_step(self, obs: torch.Tensor, state: torch.Tensor, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor, explore: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Actions (sampled, or the mode), their log-probs, values and the next state."""
        out, values, new_state = self.step(obs, state, prev_action, prev_reward)
        return (*self._sample(out, explore), values, new_state)

    def _zeros(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = obs.shape[0]
        action = torch.zeros((n, *self.spec.action_row_shape), device=obs.device)
        return self.initial_state(n).to(obs.device), action, torch.zeros(n, device=obs.device)

    def act(self, obs: torch.Tensor, explore: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`act_step` from an episode's start (no state given)."""
        return self.act_step(obs, *self._zeros(obs), explore)[:3]

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs) from an episode's start (no state given)."""
        return self.step(obs, *self._zeros(obs))[1]

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise TypeError("a recurrent model is evaluated over sequences: evaluate_sequence")


class RecurrentActorCritic(RecurrentBase):
    """The wrapped model's features -> LSTM cell -> policy and value heads."""

    def __init__(self, spec: SpaceSpec, model: ModelConfig, encoder: nn.Module):
        """`encoder`: the wrapped model, built from `encoder_of(spec, model)`."""
        super().__init__()
        self.spec = spec
        self.discrete = spec.act_kind == "discrete"
        self.cell_size = model.lstm_cell_size
        self.encoder = encoder
        self.use_prev_action = model.lstm_use_prev_action
        self.use_prev_reward = model.lstm_use_prev_reward
        width = self.encoder.feature_dim + (prev_action_dim(spec) if self.use_prev_action else 0) \
            + (1 if self.use_prev_reward else 0)
        self.lstm = nn.LSTMCell(width, self.cell_size)
        self.pi_head = init_linear(nn.Linear(self.cell_size, spec.act_dim), 0.01)
        self.vf_head = init_linear(nn.Linear(self.cell_size, 1), 1.0)
        self.register_parameter("log_std", action_log_std(spec, model.init_log_std, model.free_log_std))
        self.layout = named_layout(self)

    # ---- state

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, 2 * self.cell_size)

    def _prev_features(self, prev_action: torch.Tensor, prev_reward: torch.Tensor) -> list[torch.Tensor]:
        out = []
        if self.use_prev_action:
            columns = []
            prev_action = prev_action.reshape(prev_action.shape[0], -1)
            for s in action_slices(self.spec):
                taken = prev_action[:, s.col: s.col + s.cols]
                if s.kind == "discrete":
                    columns.append(nn.functional.one_hot(taken[:, 0].long(), s.hi - s.lo).to(torch.float32))
                else:
                    columns.append(taken.to(torch.float32))
            out.append(torch.cat(columns, dim=-1))
        if self.use_prev_reward:
            out.append(prev_reward.reshape(-1, 1).to(torch.float32))
        return out

    def _cell(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        h, c = self.lstm(x, (state[:, : self.cell_size], state[:, self.cell_size:]))
        return torch.cat([h, c], dim=-1)

    def _heads(self, h: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._masked(self.pi_head(h), obs), self.vf_head(h).squeeze(-1)

    # ---- one step (runners, compute_single_action)

    def step(self, obs: torch.Tensor, state: torch.Tensor, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.cat([self.encoder.features(self._input(obs)), *self._prev_features(prev_action, prev_reward)],
                      dim=-1)
        new_state = self._cell(x, state)
        out, values = self._heads(new_state[:, : self.cell_size], obs)
        return out, values, new_state

    # ---- whole fragments (learners)

    def evaluate_sequence(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # after a step that ended an episode the previous action and reward start from zero too;
        # the columns are cut into episode pieces and the LSTM runs over all of them in one call
        obs, actions, rewards = batch["obs"], batch["actions"], batch["rewards"]
        t_len, width = rewards.shape
        flat_obs = obs.reshape(t_len * width, -1)
        ended = batch["terminateds"] | batch["truncateds"]
        inputs = [self.encoder.features(self._input(flat_obs))]
        if self.use_prev_action or self.use_prev_reward:
            carried = torch.ones_like(ended)
            carried[1:] = ~ended[:-1]
            prev_action = torch.cat([batch["prev_action_in"][None].to(actions.dtype), actions[:-1]])
            prev_action = torch.where(carried.reshape(t_len, width, *([1] * (actions.dim() - 2))), prev_action, 0)
            prev_reward = torch.cat([batch["prev_reward_in"][None].to(rewards.dtype), rewards[:-1]]) * carried
            inputs += self._prev_features(prev_action.reshape(t_len * width, *actions.shape[2:]),
                                          prev_reward.reshape(-1))
        x = torch.cat(inputs, dim=-1).reshape(t_len, width, -1)
        h = self._unroll_pieces(x, ended, batch["state_in"].to(x.dtype))
        out, values = self._heads(h, flat_obs)
        logp, entropy = self._score(out, actions.reshape((t_len * width, *actions.shape[2:])))
        return logp.reshape(t_len, width), entropy.reshape(t_len, width), values.reshape(t_len, width)

    def _unroll_pieces(self, x: torch.Tensor, ended: torch.Tensor, state_in: torch.Tensor) -> torch.Tensor:
        """The LSTM's output [T * B, cell] over inputs `x` [T, B, W] (time-major rows),
        each column from `state_in` [B, S], from zero after every step that `ended`."""
        pieces = episode_pieces(ended)
        start = pieces.start_states(state_in, state_in.new_zeros(2 * self.cell_size))
        h0, c0 = start[:, : self.cell_size], start[:, self.cell_size:]
        cell = self.lstm
        out = torch.lstm(pieces.pack(x).reshape(pieces.count, pieces.longest, -1),
                         (h0[None].contiguous(), c0[None].contiguous()),
                         [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh],
                         True, 1, 0.0, self.training, False, True)[0]
        return pieces.unpack(out.reshape(pieces.count * pieces.longest, self.cell_size))


class EpisodePieces:
    """The steps of [T, B] columns cut after every step that ended an episode, packed as
    `count` sequences of at most `longest` steps: step (t, b) (column-major index
    b * T + t) goes to `slot` = piece * longest + position; `first`: each piece's first
    step's column-major index; `lengths` [count]."""

    def __init__(self, shape: tuple[int, int], slot: torch.Tensor, first: torch.Tensor, lengths: torch.Tensor):
        self.t_len, self.width = shape
        self.slot, self.first, self.lengths = slot, first, lengths
        self.count = int(first.shape[0])
        self.longest = int(lengths.max()) if self.count else 0

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """Time-major [T, B, ...] -> [count * longest, ...], piece by piece (padding zero)."""
        rows = x.transpose(0, 1).reshape(self.t_len * self.width, *x.shape[2:])
        packed = rows.new_zeros((self.count * self.longest, *rows.shape[1:]))
        packed[self.slot] = rows
        return packed

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[count * longest, ...] -> the real steps, time-major [T * B, ...]."""
        rows = packed[self.slot]
        rows = rows.reshape(self.width, self.t_len, *rows.shape[1:]).transpose(0, 1)
        return rows.reshape(self.t_len * self.width, *rows.shape[2:])

    def start_states(self, state_in: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
        """Each piece's first state [count, S]: a column's noted `state_in` [B, S] for the
        piece at its first step, `initial` [S] (an episode's start) for the others."""
        start = initial.to(state_in.dtype).expand(self.count, -1).clone()
        at_start = self.first % self.t_len == 0
        start[at_start] = state_in[self.first[at_start] // self.t_len]
        return start


def episode_pieces(ended: torch.Tensor) -> EpisodePieces:
    """`ended` [T, B] bool: cut each column after its ended steps (vectorized)."""
    t_len, width = ended.shape
    starts = torch.zeros_like(ended, dtype=torch.bool)
    starts[0] = True
    starts[1:] = ended[:-1].to(torch.bool)
    flat = starts.transpose(0, 1).reshape(-1)
    piece = torch.cumsum(flat.to(torch.int64), 0) - 1
    first = flat.nonzero().squeeze(-1)
    position = torch.arange(t_len * width, device=ended.device) - first[piece]
    lengths = torch.bincount(piece, minlength=int(first.shape[0]))
    longest = int(lengths.max()) if first.numel() else 0
    return EpisodePieces((t_len, width), piece * longest + position, first, lengths)
