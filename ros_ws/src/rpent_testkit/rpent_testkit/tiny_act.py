"""A tiny ACT policy with random weights, saved the LeRobot way (no hub, no download).

For tests, benchmarks and trying the LeRobot backend end to end without a trained model:

    python -m rpent_testkit.tiny_act /tmp/act_tiny      # then am_node -p checkpoint:=/tmp/act_tiny

Its features follow the LIBERO node: two 128x128 cameras and an 8-value state; actions are
7-D with dataset statistics centred on ``action_mean``, so un-normalised chunks stay well
inside libero_osc_delta's [-1, 1].
"""
from __future__ import annotations

import sys
from pathlib import Path

CAMERAS = {"agentview": "observation.images.front",
           "robot0_eye_in_hand": "observation.images.wrist"}


def build(folder, *, image_size: int = 128, state_dim: int = 8, action_dim: int = 7,
          action_mean: float = 0.25, action_std: float = 0.01, seed: int = 0) -> Path:
    import torch
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    torch.manual_seed(seed)
    image = PolicyFeature(type=FeatureType.VISUAL, shape=(3, image_size, image_size))
    cfg = ACTConfig(
        input_features={"observation.state": PolicyFeature(type=FeatureType.STATE,
                                                           shape=(state_dim,)),
                        **{key: image for key in CAMERAS.values()}},
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
        normalization_mapping={"VISUAL": NormalizationMode.MEAN_STD,
                               "STATE": NormalizationMode.MEAN_STD,
                               "ACTION": NormalizationMode.MEAN_STD},
        chunk_size=20, n_action_steps=10, dim_model=32, n_heads=2, dim_feedforward=64,
        n_encoder_layers=1, n_decoder_layers=1, latent_dim=8, n_vae_encoder_layers=1,
        pretrained_backbone_weights=None, device="cpu", push_to_hub=False)
    stats = {"observation.state": {"mean": torch.zeros(state_dim), "std": torch.ones(state_dim)},
             "action": {"mean": torch.full((action_dim,), action_mean),
                        "std": torch.full((action_dim,), action_std)}}
    for key in CAMERAS.values():
        stats[key] = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)}
    return save_checkpoint(ACTPolicy(cfg), stats, folder)


def save_checkpoint(policy, stats: dict, folder) -> Path:
    """``policy`` and its pre- and post-processors (normalising with ``stats``) as the
    checkpoint folder LeRobot's ``from_pretrained`` loads."""
    from lerobot.policies.factory import make_pre_post_processors

    pre, post = make_pre_post_processors(policy.config, dataset_stats=stats)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for part in (policy, pre, post):
        part.save_pretrained(folder)
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m rpent_testkit.tiny_act FOLDER")
    print(build(sys.argv[1]))
