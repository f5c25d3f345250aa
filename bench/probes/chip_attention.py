"""What keras.ops.dot_product_attention computes on a TPU for (batch, seq,
heads, head_dim) inputs, against jax.nn.dot_product_attention (XLA's),
non-causal and causal, scaled by 1/sqrt(head_dim) (the default) and not
scaled (scale=1), at the highest matmul precision (float32 inputs) and the
default one.

    KERAS_BACKEND=jax python3 bench/probes/chip_attention.py --out probe.jsonl
"""
import argparse
import json
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    for dtype, precision in (("float32", "highest"), ("float32", None), ("bfloat16", None)):
        for is_causal in (False, True):
            q, k, v = (jax.numpy.asarray(rng.standard_normal((2, 256, 2, 128)), dtype)
                       for _ in range(3))
            with jax.default_matmul_precision(precision):
                out = keras.ops.dot_product_attention(q, k, v, is_causal=is_causal)
                ref = {(c, s): jax.nn.dot_product_attention(q, k, v, is_causal=c, scale=s)
                       for c in (False, True) for s in (None, 1.0)}
            f = lambda x: np.asarray(x, np.float32)  # noqa: E731
            rec = {"dtype": dtype, "precision": precision, "is_causal": is_causal,
                   "max_abs_ref": float(np.max(np.abs(f(ref[False, None])))),
                   "device_kind": jax.devices()[0].device_kind}
            for (c, s), r in ref.items():
                name = f"diff_to_{'causal' if c else 'noncausal'}_{'unscaled' if s else 'scaled'}"
                rec[name] = float(np.max(np.abs(f(out) - f(r))))
            print(json.dumps(rec), flush=True)
            with open(a.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
