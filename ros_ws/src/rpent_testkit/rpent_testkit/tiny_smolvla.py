"""A tiny SmolVLA policy with random weights, saved the LeRobot way, built with no hub access.

SmolVLA is a VLM (SmolVLM2) with an action expert; its configuration names the VLM, whose
configuration, tokenizer and image processor LeRobot loads with ``transformers``'
``from_pretrained``. Here the VLM is a folder written on the spot: a SmolVLM configuration of
small dimensions, a byte-level BPE tokenizer trained on a few LIBERO instructions (with the
special tokens SmolVLA reads), and SmolVLM's image and video processors. With
``load_vlm_weights=False`` nothing is downloaded.

    python -m rpent_testkit.tiny_smolvla /tmp/smolvla_tiny   # then am_node -p checkpoint:=/tmp/smolvla_tiny/policy

Its features are those of LeRobot's LIBERO datasets (``lerobot_libero``): two 256x256
cameras and an 8-value state; a chunk is ``chunk_size`` 7-D actions.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .tiny_act import save_checkpoint

IMAGE, PATCH, SCALE = 64, 16, 2  # 4x4 patches, shuffled to 4 tokens per image
INSTRUCTIONS = ["pick the alphabet soup and place it in the basket",
                "put both the alphabet soup and the tomato sauce in the basket",
                "open the top drawer and put the bowl inside", "turn on the stove"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>",
           "<global-img>", "<image>", "<video>", "<pad>"]


def build_vlm(folder) -> Path:
    """The SmolVLM folder: config.json, tokenizer files, processor configurations."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig
    from transformers.models.smolvlm import SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(INSTRUCTIONS * 10, trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<end_of_utterance>",
        pad_token="<pad>", unk_token="<|endoftext|>", model_input_names=["input_ids", "attention_mask"],
        # SmolVLA reads these tokens' ids from the processor's tokenizer.
        extra_special_tokens={"fake_image_token": "<fake_token_around_image>",
                              "global_image_token": "<global-img>", "image_token": "<image>",
                              "end_of_utterance_token": "<end_of_utterance>"})
    size = {"longest_edge": IMAGE}
    SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(size=size, max_image_size=size,
                                              do_image_splitting=False),
        video_processor=SmolVLMVideoProcessor(size=size, max_image_size=size),
        tokenizer=tokenizer, image_seq_len=(IMAGE // PATCH) ** 2 // SCALE ** 2,
    ).save_pretrained(folder)
    config = SmolVLMConfig(
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id, scale_factor=SCALE,
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "image_size": IMAGE, "patch_size": PATCH},
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 64,
                     "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048,
                     "pad_token_id": tokenizer.pad_token_id})
    config.vocab_size = len(tokenizer)
    config.save_pretrained(folder)
    return folder


def build(folder, *, chunk_size: int = 10, seed: int = 0) -> Path:
    """``folder/vlm`` and the policy checkpoint ``folder/policy`` (returned)."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    torch.manual_seed(seed)
    folder = Path(folder)
    image = PolicyFeature(type=FeatureType.VISUAL, shape=(3, 256, 256))
    cfg = SmolVLAConfig(
        vlm_model_name=str(build_vlm(folder / "vlm")), load_vlm_weights=False, device="cpu",
        resize_imgs_with_padding=(IMAGE, IMAGE), num_vlm_layers=4, self_attn_every_n_layers=2,
        expert_width_multiplier=0.75, chunk_size=chunk_size, n_action_steps=chunk_size,
        num_steps=4, push_to_hub=False,
        input_features={"observation.images.image": image, "observation.images.image2": image,
                        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(8,))},
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))})
    # Small actions: the chunk stays well inside libero_osc_delta's [-1, 1].
    stats = {"observation.state": {"mean": torch.zeros(8), "std": torch.ones(8)},
             "action": {"mean": torch.zeros(7), "std": torch.full((7,), 0.01)}}
    return save_checkpoint(SmolVLAPolicy(cfg), stats, folder / "policy")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m rpent_testkit.tiny_smolvla FOLDER")
    print(build(sys.argv[1]))
