"""A keras-hub preset named as the model: ``hub:gemma2_2b_en``.

:func:`preset_builder` gives a builder of the preset's task model as
keras-hub builds it for fine-tuning: the ``CausalLM`` of a decoder (the
backbone alone where keras-hub has no causal LM for it), with no
preprocessor and no weights. It asks keras-hub first
(``from_preset(..., load_weights=False)``: the preset's own configuration,
fetched or cached); where keras-hub cannot reach the preset (offline, or
a model that needs a login), it builds the preset from shardviz's
catalogue of published configurations, and says which it used. A local
preset folder (one ``save_to_preset`` wrote) is named ``hub:path/to/it``.

The catalogue is every backbone entry's own preset (``listed.json``,
``text.json``, ``vision.json``) and ``presets.json``; each one's
parameter count is checked against keras-hub's preset metadata
(tests/test_hub_presets.py).

>>> is_preset("hub:gemma2_2b_en"), is_preset("models.py:build")
(True, False)
>>> listed("gemma2_instruct_2b_en").preset, listed("gemma2_2b_en").backbone
('gemma2_2b_en', 'GemmaBackbone')
>>> listed("llama3.2_1b").config["num_layers"]
16
>>> preset_builder("hub:gemma2_2b_en").__name__
'gemma2_2b_en'
"""

from __future__ import annotations

import difflib
import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..devices import quiet_start_up
from ..errors import ShardvizError
from ..model.builders import BuilderError, load_builder
from .backbone import construct
from .catalogue import entries

PREFIX = "hub:"


@dataclass(frozen=True)
class ListedPreset:
    """A preset's published configuration, as shardviz's catalogue holds it."""

    preset: str
    """The preset the configuration was published for (an alias's original)."""
    backbone: str
    """The keras-hub backbone class."""
    config: dict[str, Any]


def is_preset(text: object) -> bool:
    """Whether a model's name names a keras-hub preset (``hub:...``)."""
    return isinstance(text, str) and text.startswith(PREFIX)


@functools.cache
def _catalogue() -> dict[str, ListedPreset]:
    found = {e.preset: ListedPreset(e.preset, e.name, dict(e.preset_config))
             for e in entries() if e.preset and not e.part}
    path = resources.files("shardviz.hub") / "data" / "presets.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for raw in data["entries"]:
        item = ListedPreset(raw["preset"], raw["backbone"], raw["config"])
        found[item.preset] = item
        for alias in raw["aliases"]:
            found[alias] = item
    for alias, original in data["aliases"].items():
        found[alias] = found[original]
    return found


def listed(preset: str) -> ListedPreset | None:
    """The catalogue's configuration of a preset, or None."""
    return _catalogue().get(preset)


def listed_names() -> tuple[str, ...]:
    """Every preset name the catalogue can build without a network."""
    return tuple(sorted(_catalogue()))


def _keras_hub() -> Any:
    with quiet_start_up():
        import keras_hub
    return keras_hub


def _known_to_keras_hub(preset: str) -> tuple[bool, tuple[str, ...]]:
    """Whether keras-hub lists the preset, and the names it lists."""
    try:
        names = tuple(_keras_hub().models.Backbone.presets)
    except ImportError:
        return False, ()
    return preset in names, names


def model_of(model_or_name: Any) -> Any:
    """What every command and entry point takes as the model: a model, a
    builder, or a builder's name, ``hub:NAME`` (a keras-hub preset's
    builder) or ``module:function`` / ``file.py:function``. Anything that is
    not text is returned as it is.

    >>> model_of("shardviz.examples:mlp").__name__
    'mlp'
    """
    if is_preset(model_or_name):
        try:
            return preset_builder(model_or_name)
        except ShardvizError as e:  # the command line's usage error for a bad name
            raise BuilderError(e.message, hint=e.hint) from None
    if isinstance(model_or_name, str):
        return load_builder(model_or_name)
    return model_or_name


def preset_builder(text: str) -> Callable[[], Any]:
    """A builder of the preset ``text`` names (``hub:NAME`` or ``hub:FOLDER``).

    The builder's ``source`` says, after a build, which configuration it
    used. Raises :class:`~shardviz.errors.ShardvizError` for a name that is
    no preset, with the nearest names.
    """
    preset = text[len(PREFIX):] if is_preset(text) else text
    if not preset:
        raise ShardvizError(f"{text!r} names no preset.",
                            hint="Write hub: and a keras-hub preset name, e.g. hub:gemma2_2b_en.")
    folder = os.path.isdir(preset)
    if not folder and listed(preset) is None:
        known, names = _known_to_keras_hub(preset)
        if not known:
            near = difflib.get_close_matches(preset, sorted(set(names) | set(listed_names())),
                                             n=4, cutoff=0.6)
            raise ShardvizError(
                f"{preset!r} is not a keras-hub preset"
                + ("" if names else " (keras-hub is not installed, and shardviz's catalogue "
                   "has no such name)") + ".",
                hint=(f"Did you mean {', '.join(near)}? " if near else "")
                + "keras_hub.models.CausalLM.presets lists keras-hub's causal LM presets; "
                "a folder save_to_preset wrote is named hub:path/to/folder.")
    return _builder(preset, folder)


_UNREACHABLE: dict[str, str] = {}
"""Presets keras-hub could not reach in this process, and why: they are built
from the catalogue without asking again."""


def _builder(preset: str, folder: bool) -> Callable[[], Any]:
    def build() -> Any:
        import keras

        keras_hub = _keras_hub()
        keras.utils.set_random_seed(0)
        item = listed(preset)
        if preset not in _UNREACHABLE:
            try:
                model = _from_keras_hub(keras_hub, preset, item)
            except Exception as e:  # offline, a login needed, no such folder file
                if item is None:
                    raise ShardvizError(
                        f"keras-hub could not load the configuration of {preset!r} "
                        f"({type(e).__name__}: {str(e)[:300]}), and shardviz's catalogue has "
                        "none for it.",
                        hint="Connect to the network (and log in, for a gated model), name a "
                        f"preset the catalogue has ({', '.join(listed_names()[:6])}, ...), or "
                        "pass a builder of the model.") from None
                _UNREACHABLE[preset] = f"{type(e).__name__}: {str(e)[:100]}"
            else:
                build.source = (f"{preset}: keras-hub's own configuration "  # type: ignore[attr-defined]
                                f"({type(model).__name__}, no weights)")
                return model
        assert item is not None
        model = _from_catalogue(keras_hub, item)
        build.source = (  # type: ignore[attr-defined]
            f"{preset}: shardviz's catalogue of published configurations ({item.preset}, "
            f"{type(model).__name__}, no weights); keras-hub could not load it "
            f"({_UNREACHABLE[preset]})")
        return model

    name = os.path.basename(os.path.normpath(preset)) if folder else preset
    build.__name__ = build.__qualname__ = name
    build.source = ""  # type: ignore[attr-defined]
    build.shardviz_ref = PREFIX + (os.path.abspath(preset) if folder else preset)  # type: ignore[attr-defined]
    return build


def task_class(keras_hub: Any, backbone_cls: type) -> Any:
    """keras-hub's ``CausalLM`` for a backbone class, or None."""
    for name in sorted(dir(keras_hub.models)):
        obj = getattr(keras_hub.models, name)
        if (isinstance(obj, type) and issubclass(obj, keras_hub.models.CausalLM)
                and getattr(obj, "backbone_cls", None) is backbone_cls):
            return obj
    return None


def _from_keras_hub(keras_hub: Any, preset: str, item: ListedPreset | None) -> Any:
    if item is not None:
        backbone_cls = getattr(keras_hub.models, item.backbone)
        task = task_class(keras_hub, backbone_cls)
        if task is None:
            return backbone_cls.from_preset(preset, load_weights=False)
        return task.from_preset(preset, load_weights=False, preprocessor=None)
    try:
        return keras_hub.models.CausalLM.from_preset(preset, load_weights=False, preprocessor=None)
    except ValueError:  # a preset with no causal LM: its backbone is the model
        return keras_hub.models.Backbone.from_preset(preset, load_weights=False)


def _from_catalogue(keras_hub: Any, item: ListedPreset) -> Any:
    backbone_cls = getattr(keras_hub.models, item.backbone)
    backbone = construct(backbone_cls, item.config)
    task = task_class(keras_hub, backbone_cls)
    return backbone if task is None else task(backbone=backbone, preprocessor=None)
