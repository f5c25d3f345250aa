"""keras-hub backbones with transformer blocks, built from constructor
arguments (no weights): at the configuration of their smallest published
preset, and at a reduced size that keeps their structure (the ratio of query
heads to key/value heads, tied or untied embeddings, experts, encoder and
decoder).

The configurations are data: ``shardviz/hub/data/listed.json``,
``text.json`` and ``vision.json``, read by :mod:`~shardviz.hub.catalogue`.
Each preset's figures are its published configuration;
``bench/records/hub_maps.py --size preset`` builds each one without
allocating and checks its parameter count against the count keras-hub
publishes in the preset's metadata (``HubBackbone.count_check``), as
``tests/test_hub_backbones.py`` does for every one.

>>> from shardviz import hub
>>> hub.BACKBONES[:3]
('GemmaBackbone', 'LlamaBackbone', 'Llama3Backbone')
>>> hub.config("LlamaBackbone", "reduced")["num_key_value_heads"]
8
>>> hub.entry("ResNetBackbone")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
shardviz.errors.ShardvizError: ResNetBackbone has no transformer blocks...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..devices import quiet_start_up
from ..errors import ShardvizError
from .backbone import HubBackbone, construct
from .catalogue import entries

HUB_BACKBONES: dict[str, HubBackbone] = {b.name: b for b in entries()}
BACKBONES: tuple[str, ...] = tuple(HUB_BACKBONES)
"""In the order the issue of proving them takes: the seven with a shipped map first, then
the others it names, then every other one with transformer blocks (text, then vision)."""

_NO_TRANSFORMER = ("ResNet", "VGG", "DenseNet", "EfficientNet", "MobileNet", "CSPNet",
                   "Xception", "HGNetV2", "DeepLabV3", "RetinaNet", "FeaturePyramid",
                   "BASNet")
NOT_PROVEN = {
    "RWKV7Backbone": "its blocks are recurrent (a time mix and a channel mix), not attention",
    "MobileNetV5Backbone": "its attention is written with convolutions, not Dense kernels",
}
"""keras-hub backbones without a proven map, and why."""

DISAGREES: dict[str, str] = {}
"""Configured backbones whose map is not proven on two processes, and why: the
records of ``bench/records/hub_verify.py`` (``tests/data/hub_verify.jsonl``) show it."""

_ALIASES = {"ESM2Backbone": "ESMBackbone", "SmolLMBackbone": "SmolLM3Backbone"}
"""keras-hub exports these classes under two names."""


def entry(name: str) -> HubBackbone:
    """The entry for a backbone class name, or an error that says what exists."""
    short = name.rpartition(".")[2]
    short = _ALIASES.get(short, short)
    if short in HUB_BACKBONES:
        return HUB_BACKBONES[short]
    if short in NOT_PROVEN:
        raise ShardvizError(f"shardviz has no proven layout map for {short}: {NOT_PROVEN[short]}.",
                            hint="shardviz.suggest(model) and shardviz.layout_map_for(model, "
                            "mesh) still plan any Keras model from its layers.")
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


def builder(name: str, size: str = "reduced", whole: bool = False,
            **overrides: Any) -> Callable[[], Any]:
    """A function that builds the backbone at ``size`` (seeded, so two builds
    have equal weights); ``overrides`` replace constructor arguments (such as
    ``dtype="bfloat16"``). Where the backbone's proven map covers one
    sub-model (:attr:`~shardviz.hub.backbone.HubBackbone.part`), the
    function returns that sub-model, built inside the whole backbone so that
    its variables have the backbone's own paths; ``whole=True`` returns the
    whole backbone.

    >>> builder("StableDiffusion3Backbone").__name__
    'StableDiffusion3Backbone_reduced_diffuser'
    """
    kwargs = config(name, size) | overrides
    short = entry(name).name
    part = "" if whole else entry(name).part

    def build() -> Any:
        import keras

        with quiet_start_up():
            import keras_hub

        keras.utils.set_random_seed(0)
        backbone = construct(getattr(keras_hub.models, short), kwargs)
        return getattr(backbone, part) if part else backbone

    build.__name__ = build.__qualname__ = f"{short}_{size}" + (f"_{part}" if part else "")
    return build


def inputs(name: str, model: Any, batch: int, seq: int, size: str = "reduced") -> Any:
    """``jax.ShapeDtypeStruct``s of one batch for a backbone built at
    ``size``: each open dim after the batch is ``seq``, except where the model
    fixes an input's length (Whisper's audio frames)."""
    import jax

    from ..model.inputs import TokenBatch

    fixed = entry(name).lengths.get(size, {})
    given = TokenBatch(model, seq).at(batch)
    if not isinstance(given, dict) or not fixed:
        return given
    return {k: jax.ShapeDtypeStruct((batch, fixed[k]) + tuple(v.shape[2:]), v.dtype)
            if k in fixed else v for k, v in given.items()}


def scan(name: str, size: str = "reduced", batch: int = 8, seq: int = 32, **overrides: Any) -> Any:
    """The backbone built at ``size`` (nothing allocated) and scanned with
    one batch of its own inputs (:func:`inputs`), so that a model whose
    inputs have lengths of their own (Moonshine's audio, SAM's empty mask
    prompts) shows every layer's output to the planner. Where the proven map
    covers one part, the part is scanned ``within`` the whole backbone."""
    from ..model.scan import scan as scan_model

    # A part (SD3's diffuser) is planned within the whole backbone, so that no rule
    # written for it matches the variables around it (the text encoders' tables).
    whole = scan_model(builder(name, size, whole=True, **overrides)).model \
        if entry(name).part else None
    first = scan_model(builder(name, size, **overrides), within=whole)
    if first.outputs_source == "forward":
        return first
    given = inputs(name, first.model, batch, seq, size)
    # Built again, as every build shardviz makes, with Keras's automatic names fresh: a
    # layer a forward pass creates (SAM's) is numbered as a new process numbers it.
    again = scan_model(builder(name, size, **overrides), inputs=given, within=whole)
    return again if again.outputs_source == "forward" else first
