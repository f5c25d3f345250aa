"""Two questions for a real TPU chip, with plain Keras 3 and jax (no shardviz):

1. ``fit_edge``: does ``model.fit`` run one step of the wide model at the
   batch ``shardviz.fit`` answers for ``v5e:1x1`` (19296), and is it refused
   at the next batch (19297)? The model is ``tests/test_fit.py``'s ``wide``:
   Dense(1024) then Dense(65536) on 65536 features, Adam, mean squared error.
2. ``attention_mask``: what ``keras.ops.dot_product_attention`` computes on a
   TPU for a ``MultiHeadAttention`` called with no mask and no causal mask:
   its output against the same layer with flash attention disabled (XLA's
   attention), non-causal and causal.

Run on a machine with one TPU chip (see README.md for the set-up):

    KERAS_BACKEND=jax python3 bench/probes/chip_edge.py --out edge.jsonl

One JSON object per case is appended to ``--out``. The records made on a TPU
v5e chip are in ``tests/data/chip/v5e-1x1-edge.jsonl``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

WIDTH, HIDDEN = 2**16, 1024
EDGE = (19296, 19297)


def wide():
    inputs = keras.Input((WIDTH,))
    x = keras.layers.Dense(HIDDEN, name="up")(inputs)
    outputs = keras.layers.Dense(WIDTH, name="down")(x)
    model = keras.Model(inputs, outputs, name="wide")
    model.compile(optimizer="adam", loss="mse")
    return model


def fit_edge(batch: int) -> dict:
    rec: dict = {"case": f"wide_fit_b{batch}", "kind": "fit", "batch": batch,
                 "width": WIDTH, "hidden": HIDDEN}
    keras.utils.set_random_seed(0)
    model = wide()
    x = np.zeros((batch, WIDTH), np.float32)
    t = time.perf_counter()
    try:
        history = model.fit(x, x, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        rec["ran"] = True
        rec["loss"] = float(history.history["loss"][-1])
    except Exception as e:  # noqa: BLE001
        text = f"{type(e).__name__}: {e}"
        rec["ran"] = False
        rec["error"] = text[:800]
        m = re.search(r"Used\s+([\d.]+)([KMGT]?)\s+of\s+([\d.]+)([KMGT]?)\s+hbm", text)
        if m:
            rec["used"], rec["capacity"] = m.group(1) + m.group(2), m.group(3) + m.group(4)
    rec["seconds"] = round(time.perf_counter() - t, 2)
    del model
    keras.backend.clear_session()
    return rec


def attention_mask() -> dict:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 256, 256)).astype(np.float32)
    keras.utils.set_random_seed(0)
    kernel_layer = keras.layers.MultiHeadAttention(2, 128, name="attn")
    kernel_out = np.asarray(kernel_layer(q, q))
    keras.config.disable_flash_attention()
    try:
        xla_layer = keras.layers.MultiHeadAttention(2, 128, name="attn_xla")
        xla_layer(q, q)
        xla_layer.set_weights(kernel_layer.get_weights())
        plain = np.asarray(xla_layer(q, q))
        causal = np.asarray(xla_layer(q, q, use_causal_mask=True))
    finally:
        keras.config.enable_flash_attention()
    return {"case": "mha_no_mask", "shape": list(q.shape), "heads": 2, "head_dim": 128,
            "max_abs_diff_to_xla_noncausal": float(np.max(np.abs(kernel_out - plain))),
            "max_abs_diff_to_xla_causal": float(np.max(np.abs(kernel_out - causal))),
            "max_abs_output": float(np.max(np.abs(plain)))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--cases", default="attention,edge")
    p.add_argument("--batches", default="",
                   help="comma list of batches for the wide model (default: the edge pair)")
    a = p.parse_args()
    env = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__,
           "keras": keras.__version__}
    todo = []
    if "attention" in a.cases:
        todo.append(attention_mask)
    if "edge" in a.cases:
        batches = [int(b) for b in a.batches.split(",") if b] or list(EDGE)
        todo += [lambda b=b: fit_edge(b) for b in batches]
    for job in todo:
        rec = {**job(), **env}
        print(json.dumps(rec)[:400], flush=True)
        with open(a.out, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
