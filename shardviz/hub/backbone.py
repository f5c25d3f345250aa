"""One keras-hub backbone's entry: its smallest published preset's
configuration and a reduced one that keeps its structure, with what its
published parameter count covers (:class:`HubBackbone`). The entries are
read from ``shardviz/hub/data/*.json`` (:mod:`~shardviz.hub.catalogue`).

>>> e = HubBackbone("XBackbone", "x_base", 10, {"hidden_dim": 64}, {"hidden_dim": 8})
>>> e.count_check(trainable=10, total=12)
'params as published'
>>> e.count_check(trainable=9, total=9)
'params 9 != published 10'
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class HubBackbone:
    """One backbone class: its smallest preset's configuration and a reduced one."""

    name: str
    preset: str
    """The smallest published preset, or "" where keras-hub ships none."""
    params: int | None
    """The preset's published parameter count (keras-hub's preset metadata)."""
    preset_config: dict[str, Any]
    reduced_config: dict[str, Any]
    note: str = ""
    lengths: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per size, inputs whose length the model fixes (Whisper's 3000 audio frames)."""
    counted: str = "trainable"
    """What the published count covers: ``"trainable"`` variables, ``"all"``
    (the non-trainable ones too: frozen position tables, rotary frequencies),
    or ``"rounded"`` (published to three figures)."""
    extra: int = 0
    """Parameters the published count has that the backbone built from its
    configuration does not (a head, an encoder left out); ``note`` says which."""
    part: str = ""
    """The sub-model that is planned and proven, where the backbone's own
    forward pass cannot be traced as one program (Stable Diffusion 3's
    ``diffuser``, the part a fine-tune trains); "" for the whole backbone.
    The published count is still checked on the whole backbone."""

    def count_check(self, trainable: int, total: int) -> str:
        """Whether a build's counts give the published one."""
        if self.params is None:
            return "no published count"
        built = (total if self.counted == "all" else trainable) + self.extra
        if self.counted == "rounded":
            ok = abs(built - self.params) <= 0.005 * self.params
            return (f"params {built:,} round to the published {self.params:,}" if ok
                    else f"params {built:,} != published (rounded) {self.params:,}")
        if built != self.params:
            return f"params {built:,} != published {self.params:,}"
        if self.extra > 0:
            return f"params as published (with {self.extra:,} the backbone does not build)"
        if self.extra < 0:
            return f"params as published (without {-self.extra:,} of its variables)"
        return "params as published"


def construct(cls: Any, config: dict[str, Any]) -> Any:
    """A backbone built from its constructor arguments; a composite one (with
    sub-models written by :func:`sub`) through ``from_config``, which builds
    its sub-models from their configurations."""
    import copy

    if any(isinstance(v, dict) and "class_name" in v for v in config.values()):
        return cls.from_config(copy.deepcopy(config))
    return cls(**config)


def sub(cls: str, module: str | None = None, **config: Any) -> dict[str, Any]:
    """A sub-model's serialized configuration, for a composite backbone
    (CLIP's towers, SAM's encoders) that ``from_config`` builds: a class
    keras-hub registers as ``keras_hub>cls``, or one in ``module``. The data
    files hold composite backbones' sub-models in this form.

    >>> sub("CLIPTextEncoder", vocabulary_size=256)["class_name"]
    'keras_hub>CLIPTextEncoder'
    """
    if module:
        return {"module": module, "class_name": cls, "config": config, "registered_name": cls}
    return {"class_name": f"keras_hub>{cls}", "config": config}
