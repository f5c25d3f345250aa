"""keras-hub's vision, multimodal, video and diffusion backbones with
transformer blocks: each is its smallest published preset's configuration and
a reduced one that keeps its structure (:mod:`~shardviz.model.hub_entry`).
Composite backbones (CLIP's two towers, SAM's encoders) hold their
sub-models' serialized configurations (``sub``), which ``from_config`` builds.

>>> [e.name for e in ENTRIES][:2]
['CLIPBackbone', 'SigLIPBackbone']
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .hub_entry import entry as _b
from .hub_entry import sub as _sub


def _hgnetv2_nano(size: int) -> dict:
    """D-FINE nano's convolutional backbone, for ``size`` x ``size`` images."""
    return _sub("HGNetV2Backbone", stem_channels=[3, 16, 16],
                stackwise_stage_filters=[[16, 16, 64, 1, 3, 3], [64, 32, 256, 1, 3, 3],
                                         [256, 64, 512, 2, 3, 5], [512, 128, 1024, 1, 3, 5]],
                apply_downsample=[False, True, True, True],
                use_lightweight_conv_block=[False, False, True, True],
                depths=[1, 1, 2, 1], hidden_sizes=[64, 256, 512, 1024], embedding_size=16,
                use_learnable_affine_block=True, hidden_act="relu",
                image_shape=(size, size, 3), out_features=["stage3", "stage4"])


def _sd3(mmdit: dict, vae: dict, clip_l: dict, clip_g: dict, image_shape: tuple) -> dict:
    """Stable Diffusion 3 without T5: its diffuser's settings, and the VAE and
    the two CLIP text encoders as serialized sub-models."""
    return dict({f"mmdit_{k}": v for k, v in mmdit.items()}, mmdit_patch_size=2,
                mmdit_qk_norm=None, mmdit_dual_attention_indices=None,
                vae=_sub("VAEBackbone", "keras_hub.src.models.vae.vae_backbone",
                         sampler_method="sample", input_channels=3, sample_channels=32,
                         output_channels=3, scale=1.5305, shift=0.0609, **vae),
                clip_l=_sub("CLIPTextEncoder", name="clip_l", **{
                    "intermediate_activation": "quick_gelu", **clip_l}),
                clip_g=_sub("CLIPTextEncoder", name="clip_g", **clip_g),
                t5=None, latent_channels=16, output_channels=3, image_shape=image_shape)


def _sam3(vision: dict, text: dict, geometry: dict, encoder: dict, decoder: dict,
          mask: dict, image_shape: tuple) -> dict:
    """SAM 3's six sub-models as serialized configurations; the image shape
    is the vision encoder's and the decoder's."""
    return dict(
        vision_encoder=_sub("SAM3VisionEncoder", image_shape=image_shape, patch_size=14,
                            fpn_scale_factors=[4.0, 2.0, 1.0, 0.5], **vision),
        text_encoder=_sub("SAM3TextEncoder", max_sequence_length=32, **text),
        geometry_encoder=_sub("SAM3GeometryEncoder", roi_size=7, **geometry),
        detr_encoder=_sub("SAM3DetrEncoder", **encoder),
        detr_decoder=_sub("SAM3DetrDecoder", image_shape=image_shape, patch_size=14, **decoder),
        mask_decoder=_sub("SAM3MaskDecoder", num_upsampling_stages=3, **mask))


ENTRIES = [
    _b("CLIPBackbone", "clip_vit_base_patch16", 149620934,
       dict(vision_encoder=_sub("CLIPVisionEncoder", name="vision_encoder", patch_size=16,
                                hidden_dim=768, num_layers=12, num_heads=12,
                                intermediate_dim=3072, image_shape=(224, 224, 3)),
            text_encoder=_sub("CLIPTextEncoder", name="text_encoder", vocabulary_size=49408,
                              embedding_dim=512, hidden_dim=512, num_layers=12, num_heads=8,
                              intermediate_dim=2048, max_sequence_length=77),
            projection_dim=512),
       dict(vision_encoder=_sub("CLIPVisionEncoder", name="vision_encoder", patch_size=8,
                                hidden_dim=128, num_layers=2, num_heads=8, intermediate_dim=256,
                                image_shape=(32, 32, 3)),
            text_encoder=_sub("CLIPTextEncoder", name="text_encoder", vocabulary_size=256,
                              embedding_dim=128, hidden_dim=128, num_layers=2, num_heads=8,
                              intermediate_dim=256, max_sequence_length=64),
            projection_dim=128),
       "two towers (vision and text) and projections; sub-models as serialized configs",
       {"preset": {"token_ids": 77}}),
    _b("SigLIPBackbone", "siglip_base_patch16_224", 203156230,
       dict(vision_encoder=_sub("SigLIPVisionEncoder", name="vision_encoder", patch_size=16,
                                hidden_dim=768, num_layers=12, num_heads=12,
                                intermediate_dim=3072, image_shape=(224, 224, 3)),
            text_encoder=_sub("SigLIPTextEncoder", name="text_encoder", vocabulary_size=32000,
                              embedding_dim=768, hidden_dim=768, num_layers=12, num_heads=12,
                              intermediate_dim=3072, max_sequence_length=64)),
       dict(vision_encoder=_sub("SigLIPVisionEncoder", name="vision_encoder", patch_size=8,
                                hidden_dim=128, num_layers=2, num_heads=8, intermediate_dim=256,
                                image_shape=(32, 32, 3)),
            text_encoder=_sub("SigLIPTextEncoder", name="text_encoder", vocabulary_size=256,
                              embedding_dim=128, hidden_dim=128, num_layers=2, num_heads=8,
                              intermediate_dim=256, max_sequence_length=64)),
       "two towers; the vision tower pools with an attention head (a probe); the text "
       "length is fixed (max_sequence_length)",
       {"preset": {"token_ids": 64}, "reduced": {"token_ids": 64}}),
    _b("DeiTBackbone", "deit_tiny_distilled_patch16_224_imagenet", 5524800,
       dict(image_shape=(224, 224, 3), patch_size=16, num_layers=12, num_heads=3,
            hidden_dim=192, intermediate_dim=768),
       dict(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=8, hidden_dim=128,
            intermediate_dim=256),
       "vision: a class and a distillation token before the patches"),
    _b("DINOV2Backbone", "dinov2_small", 22582656,
       dict(patch_size=14, num_layers=12, hidden_dim=384, num_heads=6, intermediate_dim=1536,
            image_shape=(518, 518, 3), position_embedding_shape=(518, 518, 3)),
       dict(patch_size=8, num_layers=2, hidden_dim=128, num_heads=8, intermediate_dim=256,
            image_shape=(32, 32, 3), position_embedding_shape=(32, 32, 3)),
       "vision: layer scale; a frozen 518x518 position table, interpolated to the image "
       "(trainable)"),
    _b("SwinTransformerBackbone", "swin_tiny_patch4_window7_224", 27519354,
       dict(image_shape=(224, 224, 3), embed_dim=96, depths=(2, 2, 6, 2),
            num_heads=(3, 6, 12, 24), window_size=7, patch_size=4),
       dict(image_shape=(32, 32, 3), embed_dim=64, depths=(2, 2), num_heads=(4, 8),
            window_size=4, patch_size=2, drop_path=0.0),
       "vision: four stages of windowed attention, patches merged between stages"),
    _b("ViTDetBackbone", "", None,
       dict(hidden_size=768, num_layers=12, intermediate_dim=3072, num_heads=12,
            global_attention_layer_indices=[2, 5, 8, 11], image_shape=(1024, 1024, 3),
            patch_size=16, num_output_channels=256, window_size=14),
       dict(hidden_size=128, num_layers=2, intermediate_dim=256, num_heads=8,
            global_attention_layer_indices=[1], image_shape=(32, 32, 3), patch_size=8,
            num_output_channels=128, window_size=2),
       "keras-hub ships no ViTDet preset: SAM base's image encoder (windowed and global "
       "attention, relative positions, a convolutional neck)"),
    _b("SAMBackbone", "sam_base_sa1b", 93735728,
       dict(image_encoder=_sub("ViTDetBackbone", hidden_size=768, num_layers=12,
                                 intermediate_dim=3072, num_heads=12,
                                 global_attention_layer_indices=[2, 5, 8, 11],
                                 image_shape=(1024, 1024, 3), patch_size=16,
                                 num_output_channels=256, window_size=14),
            prompt_encoder=_sub("SAMPromptEncoder", hidden_size=256,
                                image_embedding_size=(64, 64), input_image_size=(1024, 1024),
                                mask_in_channels=16),
            mask_decoder=_sub("SAMMaskDecoder", hidden_size=256, num_layers=2,
                              intermediate_dim=2048, num_heads=8, embedding_dim=256,
                              num_multimask_outputs=3, iou_head_depth=3,
                              iou_head_hidden_dim=256)),
       dict(image_encoder=_sub("ViTDetBackbone", hidden_size=128, num_layers=2,
                                 intermediate_dim=256, num_heads=8,
                                 global_attention_layer_indices=[1], image_shape=(32, 32, 3),
                                 patch_size=8, num_output_channels=128, window_size=2),
            prompt_encoder=_sub("SAMPromptEncoder", hidden_size=128, image_embedding_size=(4, 4),
                                input_image_size=(32, 32), mask_in_channels=16),
            mask_decoder=_sub("SAMMaskDecoder", hidden_size=128, num_layers=2,
                              intermediate_dim=256, num_heads=8, embedding_dim=128,
                              num_multimask_outputs=3, iou_head_depth=3,
                              iou_head_hidden_dim=128)),
       "an image encoder (ViTDet), a prompt encoder, and a mask decoder the backbone holds "
       "but never calls or builds (the published count has it); no mask prompts (0 masks)",
       {"preset": {"masks": 0}, "reduced": {"masks": 0}}),
    _b("MiTBackbone", "mit_b0_ade20k_512", 3321962,
       dict(layerwise_depths=[2, 2, 2, 2], num_layers=4, layerwise_num_heads=[1, 2, 5, 8],
            layerwise_sr_ratios=[8, 4, 2, 1], max_drop_path_rate=0.1,
            layerwise_patch_sizes=[7, 3, 3, 3], layerwise_strides=[4, 2, 2, 2],
            image_shape=(512, 512, 3), hidden_dims=[32, 64, 160, 256]),
       dict(layerwise_depths=[2, 2], num_layers=2, layerwise_num_heads=[4, 8],
            layerwise_sr_ratios=[2, 1], max_drop_path_rate=0.0, layerwise_patch_sizes=[7, 3],
            layerwise_strides=[4, 2], image_shape=(32, 32, 3), hidden_dims=[64, 128]),
       "Mix Transformer: four stages of attention over a spatially reduced sequence (a "
       "strided Conv2D on keys and values) and a Mix-FFN (Dense, depthwise Conv2D, Dense)"),
    _b("SegFormerBackbone", "segformer_b0_ade20k_512", 3719027,
       dict(image_encoder=_sub("MiTBackbone", layerwise_depths=[2, 2, 2, 2], num_layers=4,
                               layerwise_num_heads=[1, 2, 5, 8],
                               layerwise_sr_ratios=[8, 4, 2, 1], max_drop_path_rate=0.1,
                               layerwise_patch_sizes=[7, 3, 3, 3],
                               layerwise_strides=[4, 2, 2, 2], image_shape=(512, 512, 3),
                               hidden_dims=[32, 64, 160, 256]),
            projection_filters=256),
       dict(image_encoder=_sub("MiTBackbone", layerwise_depths=[2, 2], num_layers=2,
                               layerwise_num_heads=[4, 8], layerwise_sr_ratios=[2, 1],
                               max_drop_path_rate=0.0, layerwise_patch_sizes=[7, 3],
                               layerwise_strides=[4, 2], image_shape=(32, 32, 3),
                               hidden_dims=[64, 128]),
            projection_filters=128),
       "a MiT encoder and an all-MLP decoder head"),
    _b("PaliGemmaBackbone", "pali_gemma_3b_224", 2923335408,
       dict(vocabulary_size=257152, image_size=224, num_layers=18, num_query_heads=8,
            num_key_value_heads=1, hidden_dim=2048, intermediate_dim=32768, head_dim=256,
            vit_patch_size=14, vit_num_heads=16, vit_hidden_dim=1152, vit_num_layers=27,
            vit_intermediate_dim=4304),
       dict(vocabulary_size=256, image_size=32, num_layers=2, num_query_heads=8,
            num_key_value_heads=1, hidden_dim=128, intermediate_dim=256, head_dim=16,
            vit_patch_size=8, vit_num_heads=8, vit_hidden_dim=128, vit_num_layers=2,
            vit_intermediate_dim=256),
       "a SigLIP image tower whose patches precede the text in a Gemma decoder; one kv head"),
    _b("DINOV3Backbone", "dinov3_vit_small_lvd1689m", 21600000,
       dict(patch_size=16, num_layers=12, hidden_dim=384, num_heads=6, intermediate_dim=1536,
            layer_scale_init_value=1.0, num_register_tokens=4, use_key_bias=False,
            image_shape=(224, 224, 3), rope_theta=100.0),
       dict(patch_size=8, num_layers=2, hidden_dim=128, num_heads=8, intermediate_dim=256,
            num_register_tokens=4, use_key_bias=False, image_shape=(32, 32, 3)),
       "vision: rotary positions over the patch grid, 4 register tokens, layer scale; "
       "keras-hub publishes a rounded count (21.6M)"),
    _b("DepthAnythingBackbone", "depth_anything_v2_small", 25311169,
       dict(image_encoder=_sub("DINOV2Backbone", patch_size=14, num_layers=12, hidden_dim=384,
                               num_heads=6, intermediate_dim=1536, image_shape=(518, 518, 3),
                               position_embedding_shape=(518, 518, 3), apply_layernorm=True),
            reassemble_factors=[4, 2, 1, 0.5], neck_hidden_dims=[48, 96, 192, 384],
            fusion_hidden_dim=64, head_hidden_dim=32, head_in_index=-1,
            feature_keys=["stage3", "stage6", "stage9", "stage12"]),
       dict(image_encoder=_sub("DINOV2Backbone", patch_size=8, num_layers=2, hidden_dim=128,
                               num_heads=8, intermediate_dim=256, image_shape=(32, 32, 3),
                               position_embedding_shape=(32, 32, 3), apply_layernorm=True),
            reassemble_factors=[2, 1], neck_hidden_dims=[32, 64], fusion_hidden_dim=32,
            head_hidden_dim=16, head_in_index=-1, feature_keys=["stage1", "stage2"]),
       "a DINOv2 encoder and a convolutional DPT neck and depth head"),
    _b("MetaCLIP2Backbone", "metaclip_2_vit_huge_patch14_224", 1858783745,
       dict(vision_encoder=_sub("MetaCLIP2VisionEncoder", name="vision_encoder", patch_size=14,
                                hidden_dim=1280, num_layers=32, num_heads=16,
                                intermediate_dim=5120, image_shape=(224, 224, 3)),
            text_encoder=_sub("MetaCLIP2TextEncoder", name="text_encoder",
                              vocabulary_size=901629, embedding_dim=1024, hidden_dim=1024,
                              num_layers=24, num_heads=16, intermediate_dim=4096,
                              max_sequence_length=77),
            projection_dim=1024),
       dict(vision_encoder=_sub("MetaCLIP2VisionEncoder", name="vision_encoder", patch_size=8,
                                hidden_dim=128, num_layers=2, num_heads=8, intermediate_dim=256,
                                image_shape=(32, 32, 3)),
            text_encoder=_sub("MetaCLIP2TextEncoder", name="text_encoder", vocabulary_size=256,
                              embedding_dim=128, hidden_dim=128, num_layers=2, num_heads=8,
                              intermediate_dim=256, max_sequence_length=64),
            projection_dim=128),
       "CLIP's two towers with a 901,629-token multilingual vocabulary",
       {"preset": {"token_ids": 77}}),
    _b("PARSeqBackbone", "parseq", 23832671,
       dict(image_encoder=_sub("ViTBackbone", image_shape=(32, 128, 3), patch_size=(4, 8),
                               num_layers=12, num_heads=6, hidden_dim=384, mlp_dim=1536,
                               use_class_token=False),
            vocabulary_size=97, max_label_length=25, decoder_hidden_dim=384,
            num_decoder_layers=1, num_decoder_heads=12, decoder_mlp_dim=1536),
       dict(image_encoder=_sub("ViTBackbone", image_shape=(32, 32, 3), patch_size=(8, 8),
                               num_layers=2, num_heads=8, hidden_dim=128, mlp_dim=256,
                               use_class_token=False),
            vocabulary_size=256, max_label_length=25, decoder_hidden_dim=128,
            num_decoder_layers=2, num_decoder_heads=8, decoder_mlp_dim=256, dropout_rate=0.0,
            attention_dropout=0.0),
       "a ViT image encoder (no class token) and a decoder that cross-attends to it; labels "
       "at most max_label_length + 1 tokens",
       {"preset": {"token_ids": 26, "padding_mask": 26},
        "reduced": {"token_ids": 26, "padding_mask": 26}}),
    _b("VideoPrismBackbone", "videoprism_public_v1_base", 114000000,
       dict(num_frames=16, patch_size=18, hidden_dim=768, intermediate_dim=3072, num_heads=12,
            num_spatial_layers=12, num_temporal_layers=4, num_auxiliary_layers=0,
            image_shape=(288, 288, 3)),
       dict(num_frames=4, patch_size=8, hidden_dim=128, intermediate_dim=256, num_heads=8,
            num_spatial_layers=2, num_temporal_layers=2, num_auxiliary_layers=0,
            image_shape=(32, 32, 3)),
       "video: attention within each frame, then across frames; keras-hub publishes a "
       "rounded count (114M)"),
    _b("BLIP2Backbone", "blip2_opt_2.7b", 3744761856,
       dict(vision_encoder=_sub("BLIP2VisionEncoder", image_size=224, patch_size=14,
                                num_layers=39, num_heads=16, hidden_dim=1408,
                                intermediate_dim=6144, use_patch_bias=True, use_class_token=True,
                                use_mha_bias=True, use_mlp_bias=True, dropout_rate=0.0,
                                layer_norm_epsilon=1e-6, initializer_range=1e-10),
            qformer=_sub("BLIP2QFormer", num_query_tokens=32, num_layers=12, num_heads=12,
                         hidden_dim=768, intermediate_dim=3072, vision_dim=1408,
                         cross_attention_frequency=2, dropout=0.1, layer_norm_epsilon=1e-12),
            language_model=_sub("BLIP2CustomOPT", vocabulary_size=50272, num_layers=32,
                                num_heads=32, hidden_dim=2560, intermediate_dim=10240,
                                num_query_tokens=32, dropout=0.1, max_sequence_length=2080,
                                qformer_hidden_dim=768)),
       dict(vision_encoder=_sub("BLIP2VisionEncoder", image_size=32, patch_size=8, num_layers=2,
                                num_heads=8, hidden_dim=128, intermediate_dim=256,
                                use_patch_bias=True, use_class_token=True, use_mha_bias=True,
                                use_mlp_bias=True, dropout_rate=0.0, layer_norm_epsilon=1e-6,
                                initializer_range=0.02),
            qformer=_sub("BLIP2QFormer", num_query_tokens=8, num_layers=2, num_heads=8,
                         hidden_dim=128, intermediate_dim=256, vision_dim=128,
                         cross_attention_frequency=2, dropout=0.0, layer_norm_epsilon=1e-12),
            language_model=_sub("BLIP2CustomOPT", vocabulary_size=256, num_layers=2, num_heads=8,
                                hidden_dim=128, intermediate_dim=256, num_query_tokens=8,
                                dropout=0.0, max_sequence_length=64, qformer_hidden_dim=128)),
       "a ViT (EVA-CLIP), a Q-Former of learned queries cross-attending to it, and OPT "
       "reading the projected queries before the text; OPT's 2048 positions plus the 32 "
       "queries (2080) give the published count"),
    _b("EdRecBackbone", "", None,
       dict(vocab_size=256, num_layers_enc=2, num_layers_dec=2, hidden_dim=128,
            intermediate_dim=256, num_heads=8, dropout=0.0),
       dict(vocab_size=256, num_layers_enc=2, num_layers_dec=2, hidden_dim=128,
            intermediate_dim=256, num_heads=8, dropout=0.0),
       "an encoder-decoder with gated feed-forward layers and RMS norms; keras-hub ships no "
       "preset and no published configuration (the preset size is the reduced one)"),
    _b("FluxBackbone", "", None,
       dict(input_channels=64, hidden_size=3072, mlp_ratio=4.0, num_heads=24, depth=19,
            depth_single_blocks=38, axes_dim=[16, 56, 56], theta=10000, use_bias=True,
            guidance_embed=False, image_shape=(4096, 64), text_shape=(256, 4096),
            image_ids_shape=(4096, 3), text_ids_shape=(256, 3), y_shape=(768,)),
       dict(input_channels=16, hidden_size=128, mlp_ratio=2.0, num_heads=8, depth=2,
            depth_single_blocks=2, axes_dim=[4, 6, 6], theta=10000, use_bias=True,
            guidance_embed=False, image_shape=(16, 16), text_shape=(16, 64),
            image_ids_shape=(16, 3), text_ids_shape=(16, 3), y_shape=(32,)),
       "diffusion: double-stream then single-stream blocks with rotary positions; keras-hub "
       "ships no preset: FLUX.1 [schnell]'s published configuration, at 1024x1024 (4096 "
       "image tokens) and 256 T5 tokens; the lengths must be fixed (the blocks cannot be "
       "traced with open ones)"),
    _b("SAM3PromptableConceptBackbone", "sam3_pcs", None,
       _sam3(vision=dict(num_layers=32, hidden_dim=1024, intermediate_dim=4736, num_heads=16,
                         fpn_hidden_dim=256, pretrain_image_shape=(336, 336, 3),
                         hidden_activation="gelu", rope_theta=10000.0, window_size=24,
                         global_attn_indexes=[7, 15, 23, 31]),
             text=dict(vocabulary_size=49408, embedding_dim=1024, hidden_dim=1024,
                       num_layers=24, num_heads=16, intermediate_dim=4096,
                       intermediate_activation="gelu", layer_norm_epsilon=1e-5),
             geometry=dict(num_layers=3, hidden_dim=256, intermediate_dim=2048, num_heads=8),
             encoder=dict(num_layers=6, hidden_dim=256, intermediate_dim=2048, num_heads=8),
             decoder=dict(num_layers=6, hidden_dim=256, intermediate_dim=2048, num_heads=8,
                          num_queries=200),
             mask=dict(hidden_dim=256, num_heads=8), image_shape=(1008, 1008, 3)),
       _sam3(vision=dict(num_layers=2, hidden_dim=128, intermediate_dim=256, num_heads=8,
                         fpn_hidden_dim=64, pretrain_image_shape=(56, 56, 3), window_size=4,
                         global_attn_indexes=[1]),
             text=dict(vocabulary_size=256, embedding_dim=128, hidden_dim=128, num_layers=2,
                       num_heads=8, intermediate_dim=256),
             geometry=dict(num_layers=2, hidden_dim=64, intermediate_dim=128, num_heads=8),
             encoder=dict(num_layers=2, hidden_dim=64, intermediate_dim=128, num_heads=8),
             decoder=dict(num_layers=2, hidden_dim=64, intermediate_dim=128, num_heads=8,
                          num_queries=16),
             mask=dict(hidden_dim=64, num_heads=8), image_shape=(112, 112, 3)),
       "promptable concept segmentation: a ViT with windowed and global attention and "
       "rotary positions, a text encoder, an encoder of box prompts, a DETR encoder that "
       "fuses them with the image and a DETR decoder of object queries, and a mask decoder; "
       "the configuration is SAM 3's published one; keras-hub's published count, a round "
       "30,000,000, is far from the 849,288,502 it builds, so no count is checked; one box "
       "prompt per image",
       {"preset": {"token_ids": 32, "padding_mask": 32, "boxes": 1, "box_labels": 1},
        "reduced": {"boxes": 1, "box_labels": 1}}),
    _b("StableDiffusion3Backbone", "stable_diffusion_3_medium", 2987080931,
       _sd3(mmdit=dict(hidden_dim=1536, num_layers=24, num_heads=24, position_size=192),
            vae=dict(encoder_num_filters=[128, 256, 512, 512], encoder_num_blocks=[2, 2, 2, 2],
                     decoder_num_filters=[512, 512, 256, 128],
                     decoder_num_blocks=[3, 3, 3, 3]),
            clip_l=dict(vocabulary_size=49408, embedding_dim=768, hidden_dim=768, num_layers=12,
                        num_heads=12, intermediate_dim=3072, intermediate_output_index=10),
            clip_g=dict(vocabulary_size=49408, embedding_dim=1280, hidden_dim=1280,
                        num_layers=32, num_heads=20, intermediate_dim=5120,
                        intermediate_activation="gelu", intermediate_output_index=30),
            image_shape=(1024, 1024, 3)),
       _sd3(mmdit=dict(hidden_dim=128, num_layers=2, num_heads=8, position_size=16),
            vae=dict(encoder_num_filters=[32, 32], encoder_num_blocks=[1, 1],
                     decoder_num_filters=[32, 32], decoder_num_blocks=[1, 1]),
            clip_l=dict(vocabulary_size=256, embedding_dim=64, hidden_dim=64, num_layers=2,
                        num_heads=4, intermediate_dim=128, intermediate_output_index=0),
            clip_g=dict(vocabulary_size=256, embedding_dim=64, hidden_dim=64, num_layers=2,
                        num_heads=4, intermediate_dim=128, intermediate_output_index=0),
            image_shape=(64, 64, 3)),
       "diffusion: its diffuser (MMDiT: joint blocks where the image and the text tokens "
       "attend together, each stream with its own fused q/k/v projection) is what is "
       "planned and proven; the backbone's own forward pass runs its scheduler, which needs "
       "the step count as a Python number, so the whole cannot be traced as one program. "
       "The two CLIP text encoders and the VAE are left to the map's defaults (replicated). "
       "Without T5 the text context is CLIP's 77 tokens padded to 154",
       {"preset": {"context": 154}}, part="diffuser"),
    _b("DFineBackbone", "dfine_nano_coco", 3788625,
       dict(backbone=_hgnetv2_nano(640),
            decoder_in_channels=[128, 128], encoder_hidden_dim=128, num_labels=80,
            num_denoising=0, learn_initial_query=False, hidden_dim=128, num_queries=300,
            anchor_image_size=(640, 640), feat_strides=[16, 32], num_feature_levels=2,
            encoder_in_channels=[512, 1024], encode_proj_layers=[1], num_attention_heads=8,
            encoder_ffn_dim=512, num_encoder_layers=1, hidden_expansion=0.34,
            depth_multiplier=0.5, eval_idx=-1, num_decoder_layers=3, decoder_attention_heads=8,
            decoder_ffn_dim=512, decoder_n_points=[6, 6], lqe_hidden_dim=64, num_lqe_layers=2,
            out_features=["stage3", "stage4"], image_shape=(640, 640, 3), seed=0),
       dict(backbone=_hgnetv2_nano(64),
            decoder_in_channels=[128, 128], encoder_hidden_dim=128, num_labels=80,
            num_denoising=0, learn_initial_query=False, hidden_dim=128, num_queries=16,
            anchor_image_size=(64, 64), feat_strides=[16, 32], num_feature_levels=2,
            encoder_in_channels=[512, 1024], encode_proj_layers=[1], num_attention_heads=8,
            encoder_ffn_dim=256, num_encoder_layers=1, hidden_expansion=0.34,
            depth_multiplier=0.5, eval_idx=-1, num_decoder_layers=2, decoder_attention_heads=8,
            decoder_ffn_dim=256, decoder_n_points=[6, 6], lqe_hidden_dim=64, num_lqe_layers=2,
            out_features=["stage3", "stage4"], image_shape=(64, 64, 3), seed=0),
       "detection: an HGNetV2 (convolutional) backbone, a hybrid encoder with one attention "
       "layer, and a decoder of self-attention, deformable cross-attention and feed-forward "
       "layers over object queries"),
]

# What each published count covers, where it is not the trainable variables alone.
_COUNTS: dict[str, dict[str, Any]] = {
    "CLIPBackbone": dict(counted="all"),  # with the position ids
    "SigLIPBackbone": dict(counted="all"),
    "DINOV2Backbone": dict(counted="all"),  # with the frozen 518 x 518 position table
    "DepthAnythingBackbone": dict(counted="all"),
    "DINOV3Backbone": dict(counted="rounded"),
    "VideoPrismBackbone": dict(counted="rounded"),
    # With the prompt encoder's fixed random features, and the mask decoder it never builds.
    "SAMBackbone": dict(counted="all", extra=4_058_340),
    "MiTBackbone": dict(extra=2_570),  # a 10-class head
    "SegFormerBackbone": dict(extra=4_883),  # a 19-class head
    "DFineBackbone": dict(counted="all", extra=-2),  # all but the 2-element seed state
}
ENTRIES = [dataclasses.replace(e, **_COUNTS.get(e.name, {})) for e in ENTRIES]
