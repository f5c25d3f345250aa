"""Settings: everything an analysis is asked for besides the model and the plan.

One frozen value. :func:`shardviz.analyze` builds it from its keywords and
keeps it on the Report (``report.settings``, resolved: ``batch``/``seq`` turned
into the inputs they stand for, sizes into bytes). Every composer that
analyses again (``why()``, ``suggest()``, ``sweep()``, ``fit()``,
``audit()``, ``layout_map_for()``) takes it whole and passes on an edited
copy, as a Plan is edited, so that a setting is added here once and every
search carries it.

>>> from shardviz.report.settings import Settings
>>> base = Settings(target="v5e:2x4", dtype="bfloat16")
>>> step = base.replace(train_step=True, batch=16, seq=512)
>>> (step.target, step.dtype, step.train_step, base.train_step)
('v5e:2x4', 'bfloat16', True, False)
>>> step.tuning.describe()
'dtype bfloat16'
>>> base.replace(trian_step=True)
Traceback (most recent call last):
...
shardviz.errors.ShardvizError: Settings has no setting 'trian_step'.
  hint: Did you mean 'train_step'? help(shardviz.analyze) describes every setting.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import Any

from ..checks.variables import DEFAULT_REPLICATED_THRESHOLD
from ..errors import ShardvizError
from ..model.tuning import Tuning
from ..target import Target

__all__ = ["Settings"]


@dataclasses.dataclass(frozen=True, eq=False)
class Settings:
    """What :func:`shardviz.analyze` is asked for besides the model and the
    plan; each field is the ``analyze`` keyword of the same name (see its
    docstring for what each means).

    Compared field by field (``==``); not hashable, since inputs may be arrays.
    """

    inputs: Any = None
    labels: Any = None
    mode: str | None = None
    train_step: bool = False
    optimizer: Any = None
    progress: Callable[[str], object] | bool | None = None
    replicated_threshold: int | str = DEFAULT_REPLICATED_THRESHOLD
    abstract_mesh: bool | None = None
    target: str | Target | None = None
    slices: int = 1
    dcn_axes: tuple[str, ...] | None = None
    processes: int | None = None
    dtype: str | None = None
    lora_rank: int | None = None
    lora_layers: tuple[str, ...] | None = None
    quantize: str | None = None
    remat: str | tuple[str, ...] | None = None
    batch: int | None = None
    seq: int | None = None

    def __post_init__(self) -> None:
        # A lone name is one axis, as a lone layer name is for lora_layers.
        if isinstance(self.dcn_axes, str):
            object.__setattr__(self, "dcn_axes", (self.dcn_axes,))
        elif self.dcn_axes is not None and not isinstance(self.dcn_axes, tuple):
            try:
                object.__setattr__(self, "dcn_axes", tuple(self.dcn_axes))
            except TypeError:
                raise ShardvizError(f"dcn_axes={self.dcn_axes!r:.60} is not an axis name or a "
                                    "list of them.", hint="e.g. dcn_axes='batch'.") from None

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes``; a name that is no setting is refused, naming it."""
        names = _names()
        for name in changes:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                raise ShardvizError(
                    f"Settings has no setting {name!r:.60}.",
                    hint=(f"Did you mean {close[0]!r}? " if close else
                          "The settings are: " + ", ".join(names) + ". ")
                    + "help(shardviz.analyze) describes every setting.")
        return dataclasses.replace(self, **changes)

    def given(self, **keywords: Any) -> Settings:
        """A copy with each of ``keywords`` that differs from its default:
        the keywords a function was called with, laid over these settings.
        A keyword left at its default keeps this value (use :meth:`replace`
        to set a default back)."""
        defaults = _defaults()
        return self.replace(**{k: v for k, v in keywords.items()
                               if not _same(v, defaults[k])})

    def layouts_only(self) -> Settings:
        """These settings with no inputs, labels or train step: an analysis of
        the layouts alone (exact variable bytes, Keras's refusals), no compile.

        >>> Settings(inputs=(8, 16), train_step=True, target="v5e:2x4").layouts_only()
        Settings(target='v5e:2x4')
        """
        return self.replace(inputs=None, labels=None, train_step=False, batch=None, seq=None)

    @property
    def tuning(self) -> Tuning:
        """The :class:`~shardviz.model.tuning.Tuning` the model is built with."""
        remat = self.remat
        return Tuning(dtype=self.dtype, lora_rank=self.lora_rank, lora_layers=self.lora_layers,
                      quantize=self.quantize,
                      remat=tuple(remat) if isinstance(remat, list) else remat)

    def as_dict(self) -> dict[str, Any]:
        """Every setting by name (values as given, not copied)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def changed(self) -> dict[str, Any]:
        """The settings that differ from their defaults."""
        defaults = _defaults()
        return {k: v for k, v in self.as_dict().items() if not _same(v, defaults[k])}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Settings):
            return NotImplemented
        return all(_same(a, b) for a, b in zip(self.as_dict().values(),
                                               other.as_dict().values(), strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in self.changed().items())
        return f"Settings({shown})"


def _names() -> list[str]:
    return [f.name for f in dataclasses.fields(Settings)]


def _defaults() -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(Settings)}


def _same(a: object, b: object) -> bool:
    """Whether two setting values are the same: equal, or the same object
    (arrays and optimizers do not compare with ``==``)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # arrays: an elementwise answer, or none
        return False


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
