"""Example models and plans, for the notebooks, the demo and the tests.

Every function returns a freshly built Keras model, so each can also be
handed to shardviz as a builder: ``shardviz.analyze(examples.mlp, plan)``.

>>> import shardviz
>>> from shardviz import examples
>>> [v.path for v in shardviz.scan(examples.mlp).variables]
['up/kernel', 'up/bias', 'down/kernel', 'down/bias']
"""

from __future__ import annotations

import functools

from ._adapters import keras as keras_adapter
from .plan import Plan


def mlp(d_model: int = 16, hidden: int = 64, name: str = "mlp"):
    """A functional two-layer MLP, ``up`` then ``down``: the Megatron pair."""
    keras = keras_adapter.keras()
    x = keras.Input((d_model,), name="x")
    h = keras.layers.Dense(hidden, activation="relu", name="up")(x)
    y = keras.layers.Dense(d_model, name="down")(h)
    return keras.Model(x, y, name=name)


def megatron_plan(batch: int = 2, model: int = 4) -> Plan:
    """Column-parallel ``up``, row-parallel ``down``: one all-reduce per MLP.

    >>> megatron_plan().rule_keys
    ('.*up/kernel', '.*up/bias', '.*down/kernel')
    """
    return Plan(
        {"batch": batch, "model": model},
        {".*up/kernel": (None, "model"), ".*up/bias": ("model",),
         ".*down/kernel": ("model", None)},
    )


def sequential_mlp(d_model: int = 16, hidden: int = 64, name: str = "sequential"):
    """The MLP as a Sequential model: its paths carry the model's name."""
    keras = keras_adapter.keras()
    return keras.Sequential([
        keras.Input((d_model,)),
        keras.layers.Dense(hidden, activation="relu", name="d1"),
        keras.layers.Dense(d_model, name="d2"),
    ], name=name)


@functools.cache
def _subclassed_classes():
    keras = keras_adapter.keras()

    class MLPBlock(keras.layers.Layer):
        """A residual MLP block with its own sublayers."""

        def __init__(self, d_model, hidden, **kwargs):
            super().__init__(**kwargs)
            self.up = keras.layers.Dense(hidden, activation="relu", name="up")
            self.down = keras.layers.Dense(d_model, name="down")

        def call(self, x):
            return x + self.down(self.up(x))

    class BlockStack(keras.Model):
        """A subclassed model: a stack of MLP blocks."""

        def __init__(self, d_model=16, hidden=64, depth=2, **kwargs):
            super().__init__(**kwargs)
            self.blocks = [MLPBlock(d_model, hidden, name=f"block_{i}") for i in range(depth)]

        def call(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    return MLPBlock, BlockStack


def subclassed_stack(d_model: int = 16, hidden: int = 64, depth: int = 2,
                     name: str = "my_model", batch: int = 2):
    """A subclassed model of residual MLP blocks, built by one call."""
    keras = keras_adapter.keras()
    _, BlockStack = _subclassed_classes()
    model = BlockStack(d_model, hidden, depth, name=name)
    model(keras.ops.zeros((batch, d_model)))
    return model


def nested(d_model: int = 16, hidden: int = 64):
    """A functional model that calls a functional MLP as a layer."""
    keras = keras_adapter.keras()
    inner = mlp(d_model, hidden, name="inner")
    x = keras.Input((d_model,), name="x")
    y = keras.layers.Dense(4, name="head")(inner(x))
    return keras.Model(x, y, name="outer")


def transformer_block(seq: int = 16, d_model: int = 64, heads: int = 8, ff: int = 256,
                      name: str = "transformer"):
    """One pre-norm transformer block: LayerNorm, MultiHeadAttention, MLP."""
    keras = keras_adapter.keras()
    x = keras.Input((seq, d_model), name="x")
    h = keras.layers.LayerNormalization(name="ln1")(x)
    h = keras.layers.MultiHeadAttention(heads, d_model // heads, name="attn")(h, h)
    x1 = keras.layers.Add(name="res1")([x, h])
    h = keras.layers.LayerNormalization(name="ln2")(x1)
    h = keras.layers.Dense(ff, activation="gelu", name="up")(h)
    h = keras.layers.Dense(d_model, name="down")(h)
    y = keras.layers.Add(name="res2")([x1, h])
    return keras.Model(x, y, name=name)


def transformer_plan(batch: int = 2, model: int = 4) -> Plan:
    """Megatron layouts for :func:`transformer_block`: heads split over
    ``model`` in attention, column then row parallel in the MLP."""
    return Plan(
        {"batch": batch, "model": model},
        {
            ".*attn/(query|key|value)/kernel": (None, "model", None),
            ".*attn/(query|key|value)/bias": ("model", None),
            ".*attn/attention_output/kernel": ("model", None, None),
            ".*up/kernel": (None, "model"),
            ".*up/bias": ("model",),
            ".*down/kernel": ("model", None),
        },
    )


def llama(n_blocks: int = 2, d_model: int = 256, ff: int = 512, heads: int = 8,
          kv_heads: int = 4, vocab: int = 1024, name: str = "llama"):
    """A Llama-shaped decoder (RMSNorm, grouped-query attention projections,
    gated MLP) as a functional model of ``EinsumDense`` and ``Dense`` layers.

    It has the variables of a Llama of that size, with the same shapes per
    block (``block_{i}_q``, ``block_{i}_gate``, ...). Attention is plain
    softmax attention over grouped key/value heads, without masking or
    rotary embeddings, which hold no variables.
    """
    keras = keras_adapter.keras()
    L = keras.layers
    head_dim = d_model // heads
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    h = L.Embedding(vocab, d_model, name="embed")(tokens)
    for i in range(n_blocks):
        b = f"block_{i}"
        n = L.RMSNormalization(name=f"{b}_attn_norm")(h)
        q = L.EinsumDense("bsd,dnh->bsnh", (None, heads, head_dim), name=f"{b}_q")(n)
        k = L.EinsumDense("bsd,dnh->bsnh", (None, kv_heads, head_dim), name=f"{b}_k")(n)
        v = L.EinsumDense("bsd,dnh->bsnh", (None, kv_heads, head_dim), name=f"{b}_v")(n)
        mixed = _grouped_attention(q, k, v, heads // kv_heads)
        o = L.EinsumDense("bsnh,nhd->bsd", (None, d_model), name=f"{b}_o")(mixed)
        h = L.Add(name=f"{b}_attn_res")([h, o])
        n = L.RMSNormalization(name=f"{b}_mlp_norm")(h)
        gate = L.Dense(ff, activation="silu", use_bias=False, name=f"{b}_gate")(n)
        up = L.Dense(ff, use_bias=False, name=f"{b}_up")(n)
        m = L.Multiply(name=f"{b}_mul")([gate, up])
        down = L.Dense(d_model, use_bias=False, name=f"{b}_down")(m)
        h = L.Add(name=f"{b}_mlp_res")([h, down])
    h = L.RMSNormalization(name="final_norm")(h)
    logits = L.Dense(vocab, use_bias=False, name="lm_head")(h)
    return keras.Model(tokens, logits, name=name)


def _grouped_attention(q, k, v, group: int):
    ops = keras_adapter.keras().ops
    k = ops.repeat(k, group, axis=2)
    v = ops.repeat(v, group, axis=2)
    scale = 1.0 / float(q.shape[-1]) ** 0.5
    scores = ops.softmax(ops.einsum("bqnh,bknh->bnqk", q, k) * scale, axis=-1)
    return ops.einsum("bnqk,bknh->bqnh", scores, v)


def llama_8b():
    """Llama-3-8B shapes: 32 blocks, d=4096, ff=14336, 32 heads, 8 KV heads."""
    return llama(32, 4096, 14336, 32, 8, 128256, name="llama_8b")


def llama_70b():
    """Llama-3-70B shapes: 80 blocks, d=8192, ff=28672, 64 heads, 8 KV heads."""
    return llama(80, 8192, 28672, 64, 8, 128256, name="llama_70b")


def llama_plan(data: int = 2, model: int = 4) -> Plan:
    """Tensor-parallel rules for :func:`llama` on a ``(batch, model)`` mesh."""
    return Plan(
        {"batch": data, "model": model},
        {
            "embed/embeddings": ("model", None),
            r"block_\d+_(q|k|v)/kernel": (None, "model", None),
            r"block_\d+_o/kernel": ("model", None, None),
            r"block_\d+_(gate|up)/kernel": (None, "model"),
            r"block_\d+_down/kernel": ("model", None),
            "lm_head/kernel": (None, "model"),
        },
    )
