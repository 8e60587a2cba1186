"""The one place a model is built from the spaces and the `model` dict: the learner
(`Learner.build_model`), the runners' torch policy and the early checks all call
`build_model`.

- vector observations: the fully connected `ActorCritic` (`fcnet_hiddens`, ...);
- image observations (a Box of 2 or 3 dims, at least 32x32, or 8x8 of uint8): the CNN,
  `ConvActorCritic` (Nature CNN, or the IMPALA ResNet with `conv_type="impala"`),
  also when no model key is given; `conv_filters=[]` there is an error;
- a Dict or Tuple observation holding images: `StructActorCritic` (a CNN per image,
  an MLP over the other leaves);
- `custom_model`: the user's module in `CustomActorCritic`; a module that defines
  `get_initial_state` is recurrent itself, in `CustomRecurrentActorCritic`;
- `use_lstm`: any of these inside `RecurrentActorCritic` (an LSTM between its features and
  the heads).
(`ftrl.rl.models.kinds.model_kind` decides, without torch.)
"""

from __future__ import annotations

from torch import nn

from ftrl.config import ModelConfig
from ftrl.rl.models.kinds import model_kind
from ftrl.rl.spaces import SpaceSpec


def build_model(spec: SpaceSpec, model_config: ModelConfig | None = None) -> nn.Module:
    """The actor-critic for these spaces (act, evaluate, value, get_flat, set_flat,
    num_params, layout). ConfigError for a model that cannot work on them."""
    model_config = model_config or ModelConfig()
    kind = model_kind(spec, model_config)
    if kind == "custom":
        from ftrl.rl.models.custom import keeps_state, load_custom_model

        cls = load_custom_model(str(model_config.custom_model))
        if keeps_state(cls):
            from ftrl.rl.models.custom_recurrent import CustomRecurrentActorCritic

            return CustomRecurrentActorCritic(spec, model_config, cls)
    if model_config.use_lstm:
        from ftrl.rl.models.recurrent import RecurrentActorCritic, encoder_of

        return RecurrentActorCritic(spec, model_config, build_model(*encoder_of(spec, model_config)))
    if kind == "custom":
        from ftrl.rl.models.custom import CustomActorCritic

        return CustomActorCritic(spec, model_config)
    if kind == "struct":
        from ftrl.rl.models.struct_model import StructActorCritic

        return StructActorCritic(spec, model_config)
    if kind == "cnn":
        from ftrl.rl.models.cnn import ConvActorCritic

        return ConvActorCritic(spec, model_config)
    from ftrl.rl.models.actor_critic import ActorCritic

    return ActorCritic(spec, model_config)

