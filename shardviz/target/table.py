"""The table of targets shardviz knows, for notebooks and docs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .chips import HARDWARE
from .slices import PRODUCT_NAMES

if TYPE_CHECKING:
    import pandas as pd


def targets() -> pd.DataFrame:
    """The hardware shardviz knows, one row each, with the source of every
    figure. Bandwidths are bytes per second one way, per chip.

    >>> t = targets()
    >>> t.loc[t.name == "v5e", ["hbm_bytes", "link"]].values.tolist()
    [[17179869184, 'ici']]
    """
    import pandas as pd

    rows = []
    for h in HARDWARE.values():
        rows.append({
            "name": h.name, "family": h.family, "device_kind": h.device_kind,
            "chips": h.max_chips, "hbm_bytes": h.hbm_bytes, "hbm_bandwidth": h.hbm_bandwidth,
            "peak_bf16_flops": h.peak_flops, "link": h.link, "link_bandwidth": h.link_bandwidth,
            "between": h.between, "between_bandwidth": h.between_bandwidth,
            "products": ", ".join(f"{p} ({t.split(':')[1]})" for p, t in PRODUCT_NAMES.items()
                                  if t.startswith(h.name + ":")),
            "source": h.source,
        })
    frame = pd.DataFrame(rows)
    return frame.astype({"hbm_bytes": "Int64", "chips": "Int64"})
