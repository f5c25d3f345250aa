"""keras-hub backbones with transformer blocks, built from constructor
arguments (no weights): at the configuration of their smallest published
preset, and at a reduced size that keeps their structure (the ratio of query
heads to key/value heads, tied or untied embeddings, experts, encoder and
decoder).

Each preset's figures are its published configuration; ``bench/hub_maps.py
--size preset`` builds each one without allocating and checks its trainable
parameter count against the count keras-hub publishes in the preset's
metadata (``HubBackbone.params``), as ``tests/test_hub_backbones.py`` does
for three of them.

>>> from shardviz.model import hub_backbones
>>> hub_backbones.BACKBONES[:3]
('GemmaBackbone', 'LlamaBackbone', 'Llama3Backbone')
>>> hub_backbones.config("LlamaBackbone", "reduced")["num_key_value_heads"]
8
>>> hub_backbones.entry("ResNetBackbone")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
shardviz.errors.ShardvizError: ResNetBackbone has no transformer blocks...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..errors import ShardvizError


@dataclasses.dataclass(frozen=True)
class HubBackbone:
    """One backbone class: its smallest preset's configuration and a reduced one."""

    name: str
    preset: str
    params: int | None
    preset_config: dict[str, Any]
    reduced_config: dict[str, Any]
    note: str = ""
    lengths: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per size, inputs whose length the model fixes (Whisper's 3000 audio frames)."""


def _b(name: str, preset: str, params: int | None, full: dict, reduced: dict,
       note: str = "", lengths: dict | None = None) -> HubBackbone:
    return HubBackbone(name, preset, params, full, reduced, note, lengths or {})


_NO_DROPOUT = {"dropout": 0.0}
# Reduced sizes: vocabulary 256, 2 layers, hidden 128 (or 16 per query head),
# the preset's ratio of query to kv heads, at most 8 experts.
_ENTRIES = [
    # The seven that ship get_layout_map, in keras-hub's order.
    _b("GemmaBackbone", "gemma_2b_en", 2506172416,
       dict(vocabulary_size=256000, num_layers=18, num_query_heads=8, num_key_value_heads=1,
            hidden_dim=2048, intermediate_dim=32768, head_dim=256),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=1,
            hidden_dim=128, intermediate_dim=256, head_dim=16),
       "multi-query attention: one kv head; kernels heads-first"),
    _b("LlamaBackbone", "llama2_7b_en", 6738415616,
       dict(vocabulary_size=32000, num_layers=32, num_query_heads=32, num_key_value_heads=32,
            hidden_dim=4096, intermediate_dim=11008),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=8,
            hidden_dim=128, intermediate_dim=256)),
    _b("Llama3Backbone", "llama3.2_1b", 1498482688,
       dict(vocabulary_size=128256, num_layers=16, num_query_heads=32, num_key_value_heads=8,
            hidden_dim=2048, intermediate_dim=8192),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=2,
            hidden_dim=128, intermediate_dim=256),
       "keras-hub's preset keeps the output embedding apart (its published count has both)"),
    _b("QwenBackbone", "qwen2.5_0.5b_en", 494032768,
       dict(vocabulary_size=151936, num_layers=24, num_query_heads=14, num_key_value_heads=2,
            hidden_dim=896, intermediate_dim=4864, tie_word_embeddings=True),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=7, num_key_value_heads=1,
            hidden_dim=112, intermediate_dim=256, tie_word_embeddings=True),
       "7 query heads per kv head; tied embeddings"),
    _b("Qwen2Backbone", "qwen2.5_0.5b_en", 494032768,
       dict(vocabulary_size=151936, num_layers=24, num_query_heads=14, num_key_value_heads=2,
            hidden_dim=896, intermediate_dim=4864, tie_word_embeddings=True),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=7, num_key_value_heads=1,
            hidden_dim=112, intermediate_dim=256, tie_word_embeddings=True),
       "QwenBackbone's configuration (the same architecture)"),
    _b("QwenMoeBackbone", "qwen1.5_moe_2.7b_en", 14315784192,
       dict(vocabulary_size=151936, num_layers=24, num_query_heads=16, num_key_value_heads=16,
            hidden_dim=2048, intermediate_dim=5632, moe_intermediate_dim=1408,
            shared_expert_intermediate_dim=5632, num_experts=60, top_k=4),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=8,
            hidden_dim=128, intermediate_dim=256, moe_intermediate_dim=64,
            shared_expert_intermediate_dim=128, num_experts=12, top_k=4),
       "60 experts (12 reduced: divisible by 4, not by 8) and a shared expert"),
    _b("Qwen3MoeBackbone", "qwen3_moe_30b_a3b_en", 30532122624,
       dict(vocabulary_size=151936, num_layers=48, num_query_heads=32, num_key_value_heads=4,
            hidden_dim=2048, intermediate_dim=6144, moe_intermediate_dim=768, num_experts=128,
            top_k=8, head_dim=128, norm_top_k_prob=True),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=1,
            hidden_dim=128, intermediate_dim=256, moe_intermediate_dim=64, num_experts=8,
            top_k=2, head_dim=16, norm_top_k_prob=True),
       "128 experts (8 reduced)"),
    # Then the ones the issue lists, without a shipped map.
    _b("Gemma3Backbone", "gemma3_270m", 268098176,
       dict(vocabulary_size=262144, image_size=896, num_layers=18, num_query_heads=4,
            num_key_value_heads=1, hidden_dim=640, intermediate_dim=2048, head_dim=256,
            use_post_ffw_norm=True, use_post_attention_norm=True,
            use_sliding_window_attention=True, sliding_window_size=512),
       dict(vocabulary_size=256, image_size=896, num_layers=2, num_query_heads=4,
            num_key_value_heads=1, hidden_dim=128, intermediate_dim=256, head_dim=16,
            use_post_ffw_norm=True, use_post_attention_norm=True,
            use_sliding_window_attention=True, sliding_window_size=16),
       "text only; one kv head"),
    _b("MistralBackbone", "mistral_7b_en", 7241732096,
       dict(vocabulary_size=32000, num_layers=32, num_query_heads=32, num_key_value_heads=8,
            hidden_dim=4096, intermediate_dim=14336, sliding_window=4096),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=2,
            hidden_dim=128, intermediate_dim=256, sliding_window=16)),
    _b("MixtralBackbone", "mixtral_8_7b_en", 46702792704,
       dict(vocabulary_size=32000, num_layers=32, num_query_heads=32, num_key_value_heads=8,
            hidden_dim=4096, intermediate_dim=14336, num_experts=8, top_k=2,
            sliding_window=4096),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=2,
            hidden_dim=128, intermediate_dim=256, num_experts=8, top_k=2, sliding_window=16)),
    _b("Phi3Backbone", "phi3_mini_4k_instruct_en", 3821079552,
       dict(vocabulary_size=32064, num_layers=32, num_query_heads=32, num_key_value_heads=32,
            hidden_dim=3072, intermediate_dim=8192),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=8,
            hidden_dim=128, intermediate_dim=256, max_sequence_length=64,
            pretraining_sequence_length=64)),
    _b("Qwen3Backbone", "qwen3_0.6b_en", 596049920,
       dict(vocabulary_size=151936, num_layers=28, num_query_heads=16, num_key_value_heads=8,
            head_dim=128, hidden_dim=1024, intermediate_dim=3072, tie_word_embeddings=True),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=4,
            head_dim=16, hidden_dim=128, intermediate_dim=256, tie_word_embeddings=True),
       "tied embeddings"),
    _b("GPT2Backbone", "gpt2_base_en", 124439808,
       dict(vocabulary_size=50257, num_layers=12, num_heads=12, hidden_dim=768,
            intermediate_dim=3072, max_sequence_length=1024, **_NO_DROPOUT),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, max_sequence_length=64, **_NO_DROPOUT),
       "tied embeddings"),
    _b("GPTNeoXBackbone", "", None,
       dict(vocabulary_size=50304, num_layers=6, num_heads=8, hidden_dim=512,
            intermediate_dim=2048, max_sequence_length=2048),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, max_sequence_length=64),
       "keras-hub ships no preset: the published Pythia-70M configuration"),
    _b("FalconBackbone", "falcon_refinedweb_1b_en", 1311625216,
       dict(vocabulary_size=50304, num_layers=24, num_attention_heads=32, hidden_dim=2048,
            intermediate_dim=8192),
       dict(vocabulary_size=256, num_layers=2, num_attention_heads=8, hidden_dim=128,
            intermediate_dim=256)),
    _b("BloomBackbone", "bloom_560m_multi", 559214592,
       dict(vocabulary_size=250880, num_layers=24, num_heads=16, hidden_dim=1024,
            intermediate_dim=4096),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256)),
    _b("OPTBackbone", "opt_125m_en", 125237760,
       dict(vocabulary_size=50272, num_layers=12, num_heads=12, hidden_dim=768,
            intermediate_dim=3072, max_sequence_length=2048, **_NO_DROPOUT),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, max_sequence_length=64, **_NO_DROPOUT)),
    _b("GptOssBackbone", "gpt_oss_20b_en", 20914757184,
       dict(vocabulary_size=201088, num_layers=24, num_query_heads=64, num_key_value_heads=8,
            hidden_dim=2880, intermediate_dim=2880, num_experts=32, top_k=4, head_dim=64,
            sliding_window=128),
       dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=1,
            hidden_dim=128, intermediate_dim=128, num_experts=8, top_k=2, head_dim=16,
            sliding_window=16),
       "32 experts (8 reduced)"),
    _b("BertBackbone", "bert_tiny_en_uncased", 4385920,
       dict(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=128,
            intermediate_dim=512, **_NO_DROPOUT),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, max_sequence_length=64, **_NO_DROPOUT),
       "an encoder"),
    _b("RobertaBackbone", "roberta_base_en", 124052736,
       dict(vocabulary_size=50265, num_layers=12, num_heads=12, hidden_dim=768,
            intermediate_dim=3072, **_NO_DROPOUT),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, max_sequence_length=64, **_NO_DROPOUT),
       "an encoder"),
    _b("DebertaV3Backbone", "deberta_v3_extra_small_en", 70682112,
       dict(vocabulary_size=128100, num_layers=12, num_heads=6, hidden_dim=384,
            intermediate_dim=1536, **_NO_DROPOUT),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, max_sequence_length=64, bucket_size=16, **_NO_DROPOUT),
       "an encoder with relative positions"),
    _b("T5Backbone", "t5_small_multi", 60506624,
       dict(vocabulary_size=32128, num_layers=6, num_heads=8, hidden_dim=512,
            intermediate_dim=2048, key_value_dim=64, activation="relu",
            use_gated_activation=False, **_NO_DROPOUT),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, key_value_dim=16, activation="relu",
            use_gated_activation=False, **_NO_DROPOUT),
       "an encoder-decoder; tied embeddings"),
    _b("BartBackbone", "bart_base_en", 139417344,
       dict(vocabulary_size=50265, num_layers=6, num_heads=12, hidden_dim=768,
            intermediate_dim=3072, **_NO_DROPOUT),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, max_sequence_length=64, **_NO_DROPOUT),
       "an encoder-decoder"),
    _b("ViTBackbone", "vit_base_patch16_224_imagenet", 85798656,
       dict(image_shape=(224, 224, 3), patch_size=16, num_layers=12, num_heads=12,
            hidden_dim=768, mlp_dim=3072),
       dict(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=8,
            hidden_dim=128, mlp_dim=256),
       "vision: images in, patches as the sequence"),
    _b("WhisperBackbone", "whisper_tiny_en", 37184256,
       dict(vocabulary_size=51864, num_layers=4, num_heads=6, hidden_dim=384,
            intermediate_dim=1536, num_mels=80, max_encoder_sequence_length=3000,
            max_decoder_sequence_length=448),
       dict(vocabulary_size=256, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256, num_mels=16, max_encoder_sequence_length=64,
            max_decoder_sequence_length=32),
       "an encoder-decoder over audio features",
       {"preset": {"encoder_features": 3000, "decoder_token_ids": 448,
                   "decoder_padding_mask": 448},
        "reduced": {"encoder_features": 64, "decoder_token_ids": 32,
                    "decoder_padding_mask": 32}}),
]

HUB_BACKBONES: dict[str, HubBackbone] = {b.name: b for b in _ENTRIES}
BACKBONES: tuple[str, ...] = tuple(HUB_BACKBONES)
"""In the order the issue of proving them takes: the seven with a shipped map first."""

_NO_TRANSFORMER = ("ResNet", "VGG", "DenseNet", "EfficientNet", "MobileNet", "CSPNet",
                   "Xception", "HGNetV2", "DeepLabV3", "RetinaNet", "FeaturePyramid",
                   "BASNet", "MiT")


def entry(name: str) -> HubBackbone:
    """The entry for a backbone class name, or an error that says what exists."""
    short = name.rpartition(".")[2]
    if short in HUB_BACKBONES:
        return HUB_BACKBONES[short]
    if short.startswith(_NO_TRANSFORMER):
        raise ShardvizError(
            f"{short} has no transformer blocks.",
            hint="shardviz proves layout maps for keras-hub's transformer backbones; "
            "shardviz.suggest(model) still plans any Keras model from its layers.")
    import difflib

    near = difflib.get_close_matches(short, BACKBONES, n=3, cutoff=0.5)
    raise ShardvizError(f"{name!r} is not one of the keras-hub backbones shardviz has "
                        "configurations for.",
                        hint=(f"Did you mean {' or '.join(near)}? " if near else "")
                        + "Any model you build works with shardviz.layout_map_for(model, "
                        f"mesh). Known: {', '.join(BACKBONES)}.")


def config(name: str, size: str = "preset") -> dict[str, Any]:
    """The constructor arguments of a backbone at ``size``: ``"preset"`` (its
    smallest published preset) or ``"reduced"``."""
    if size not in ("preset", "reduced"):
        raise ShardvizError(f"size={size!r} is not a size.", hint="Give 'preset' or 'reduced'.")
    b = entry(name)
    return dict(b.preset_config if size == "preset" else b.reduced_config)


def builder(name: str, size: str = "reduced", **overrides: Any) -> Callable[[], Any]:
    """A function that builds the backbone at ``size`` (seeded, so two builds
    have equal weights); ``overrides`` replace constructor arguments (such as
    ``dtype="bfloat16"``)."""
    kwargs = config(name, size) | overrides
    short = entry(name).name

    def build():
        import keras
        import keras_hub

        keras.utils.set_random_seed(0)
        return getattr(keras_hub.models, short)(**kwargs)

    build.__name__ = build.__qualname__ = f"{short}_{size}"
    return build


def inputs(name: str, model: Any, batch: int, seq: int, size: str = "reduced") -> Any:
    """``jax.ShapeDtypeStruct``s of one batch for a backbone built at
    ``size``: each open dim after the batch is ``seq``, except where the model
    fixes an input's length (Whisper's audio frames)."""
    import jax

    from .inputs import TokenBatch

    fixed = entry(name).lengths.get(size, {})
    given = TokenBatch(model, seq).at(batch)
    if not isinstance(given, dict) or not fixed:
        return given
    return {k: jax.ShapeDtypeStruct((batch, fixed[k]) + tuple(v.shape[2:]), v.dtype)
            if k in fixed else v for k, v in given.items()}

