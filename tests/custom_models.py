"""Custom models by import path for the tests ("tests.custom_models:TinyNet"): one that
follows the interface and one for each way to get it wrong."""

from __future__ import annotations

import math

import torch
from torch import nn


class TinyNet(nn.Module):
    """forward(obs [B, *obs_shape]) -> (logits [B, num_outputs], value [B])."""

    def __init__(self, obs_shape: tuple[int, ...], num_outputs: int, hidden: int = 16):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(obs_shape), hidden), nn.Tanh())
        self.logits = nn.Linear(hidden, num_outputs)
        self.value = nn.Linear(hidden, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        return self.logits(h), self.value(h).squeeze(-1)


class WrongLogits(TinyNet):
    """One logit too many."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = super().forward(obs)
        return torch.cat([logits, logits[:, :1]], dim=1), value


class OnlyLogits(TinyNet):
    """No value."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(obs)[0]


class NotAModule:
    """A class, but no torch module."""

    def __init__(self, obs_shape: tuple[int, ...], num_outputs: int):
        pass


def not_a_class(obs_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    return TinyNet(obs_shape, num_outputs)


class NumpyNet(TinyNet):
    """Goes through numpy in forward: runs, but a trace freezes its data (no export)."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import numpy as np

        scaled = torch.as_tensor(np.tanh(obs.detach().cpu().numpy()))
        return super().forward(scaled)


class BranchNet(TinyNet):
    """Branches on its input's values in Python: torch.export (ONNX) cannot follow it."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if float(obs.abs().sum()) > 1e9:
            obs = obs / 2
        return super().forward(obs)


class TargetNet(nn.Module):
    """For MaskedChoiceEnv's Dict observation: reads obs["observations"]["target"] and
    obs["observations"]["step"] (nested dicts of leaves), never the mask."""

    def __init__(self, obs_shape: dict, num_outputs: int, hidden: int = 16):
        super().__init__()
        inner = obs_shape["observations"]
        self.target_dim = math.prod(inner["target"])
        self.body = nn.Sequential(nn.Linear(self.target_dim + inner["step"][0], hidden), nn.Tanh())
        self.logits = nn.Linear(hidden, num_outputs)
        self.value = nn.Linear(hidden, 1)

    def forward(self, obs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        inner = obs["observations"]
        assert set(obs) == {"observations"} and inner["target"].shape[1:] == (self.target_dim,)
        h = self.body(torch.cat([inner["target"], inner["step"]], dim=-1))
        return self.logits(h), self.value(h).squeeze(-1)


class StatefulNet(TinyNet):
    """Returns (logits, value, state), as a recurrent model of its own would."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, value = super().forward(obs)
        return logits, value, torch.zeros(obs.shape[0], 4)


class RecurrentNet(nn.Module):
    """A custom recurrent model: an nn.LSTM over [B, T, *obs_shape], its (h, c) the state."""

    def __init__(self, obs_shape: tuple[int, ...], num_outputs: int, hidden: int = 16):
        super().__init__()
        self.hidden = hidden
        self.lstm = nn.LSTM(math.prod(obs_shape), hidden, batch_first=True)
        self.logits = nn.Linear(hidden, num_outputs)
        self.value = nn.Linear(hidden, 1)

    def get_initial_state(self) -> list[torch.Tensor]:
        return [torch.zeros(self.hidden), torch.full((self.hidden,), 0.5)]  # c starts non-zero: not reset to 0

    def forward(self, obs: torch.Tensor, state: list[torch.Tensor], seq_lens: torch.Tensor):
        b, t = obs.shape[:2]
        out, (h, c) = self.lstm(obs.reshape(b, t, -1), (state[0][None].contiguous(), state[1][None].contiguous()))
        return self.logits(out), self.value(out).squeeze(-1), [h[0], c[0]]


class RecurrentNoState(RecurrentNet):
    """get_initial_state returns nothing."""

    def get_initial_state(self) -> list[torch.Tensor]:
        return []


class RecurrentWrongState(RecurrentNet):
    """Returns only h as the new state."""

    def forward(self, obs: torch.Tensor, state: list[torch.Tensor], seq_lens: torch.Tensor):
        logits, value, new_state = super().forward(obs, state, seq_lens)
        return logits, value, new_state[:1]
