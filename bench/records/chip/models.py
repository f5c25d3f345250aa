"""Plain Keras 3 models for the chip records (KERAS_BACKEND=jax).

Imports only keras and numpy (keras-hub for the keras-hub builder, when it is
called); shardviz is not needed. Each builder returns a
built and COMPILED ``keras.Model``. The dtype policy is set with
``keras.config.set_dtype_policy`` just before the layers are made and the
previous global policy is restored afterwards (layers keep the policy they
were created with), so builders can be called in any order.

Full-size defaults are the measured configurations; ``TINY[name]`` holds
keyword arguments that make the same builder run on a CPU in seconds::

    model = decoder()                        # 335M parameters
    x, y = decoder_data(batch=8, seq=1024)
    model.fit(x, y, batch_size=8)

    tiny = decoder(**TINY["decoder"])
    x, y = decoder_data(8, seq=TINY["decoder"]["seq"], vocab=TINY["decoder"]["vocab"])
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402

ops = keras.ops
L = keras.layers

# Keyword arguments for a CPU-sized version of each builder.
TINY = {
    "decoder": dict(n_blocks=2, d_model=64, heads=4, ff=128, vocab=512, seq=32),
    "decoder_lora": dict(n_blocks=2, d_model=64, heads=4, ff=128, vocab=512, seq=32),
    "encoder": dict(n_blocks=2, d_model=64, heads=4, ff=128, vocab=512, seq=32),
    "dict_model": dict(n_blocks=1, d_model=32, heads=2, ff=64, vocab=256, seq=16,
                       num_classes=3),
    "hub_gpt2": dict(n_layers=2, d_model=64, heads=4, ff=128, vocab=512, seq=32),
    "decoder_remat": dict(n_blocks=2, d_model=64, heads=4, ff=128, vocab=512, seq=32),
    "hub_llama_lora": dict(n_layers=2, d_model=64, heads=4, kv_heads=2, ff=128, vocab=512,
                           seq=32),
    "hub_qwen": dict(n_layers=2, d_model=64, heads=4, kv_heads=2, ff=128, vocab=512, seq=32),
    "hub_gpt2_default": dict(n_layers=2, d_model=64, heads=4, ff=128, vocab=512, seq=32),
}


# --------------------------------------------------------------------------
# layers without variables (or with one), used by the builders


class CausalSelfAttention(L.Layer):
    """Softmax attention over (batch, seq, heads, head_dim) q, k, v with a
    causal mask. No variables. Scores are taken in the compute dtype and the
    softmax in float32 (as keras-hub's Llama does), then cast back."""

    def call(self, q, k, v):
        t = ops.shape(q)[1]
        scale = 1.0 / float(q.shape[-1]) ** 0.5
        scores = ops.einsum("bqnh,bknh->bnqk", q, k) * ops.cast(scale, q.dtype)
        mask = ops.tril(ops.ones((t, t), dtype="bool"))
        scores = ops.where(mask[None, None, :, :], ops.cast(scores, "float32"),
                           ops.cast(-1e9, "float32"))
        probs = ops.cast(ops.softmax(scores, axis=-1), v.dtype)
        return ops.einsum("bnqk,bknh->bqnh", probs, v)


class PositionEmbedding(L.Layer):
    """Adds a learned (max_len, d_model) position table to its input."""

    def __init__(self, max_len, **kwargs):
        super().__init__(**kwargs)
        self.max_len = max_len

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.max_len, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02))

    def call(self, x):
        t = ops.shape(x)[1]
        return x + ops.cast(self.embeddings[:t], x.dtype)[None]


class MaskedMeanPool(L.Layer):
    """Mean over the sequence of the positions where the mask is 1."""

    def call(self, x, mask):
        m = ops.cast(mask, x.dtype)[:, :, None]
        return ops.sum(x * m, axis=1) / ops.maximum(ops.sum(m, axis=1), 1)


class FirstToken(L.Layer):
    """x[:, 0, :] (the [CLS] position)."""

    def call(self, x):
        return x[:, 0, :]


# --------------------------------------------------------------------------
# helpers


class _policy:
    """Set the global dtype policy for the duration of a build."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.saved = keras.config.dtype_policy()
        keras.config.set_dtype_policy(self.name)

    def __exit__(self, *exc):
        keras.config.set_dtype_policy(self.saved)


def _compile(model, learning_rate):
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _decoder_graph(n_blocks, d_model, heads, ff, vocab, seq, name):
    """Llama-shaped causal decoder: embed, n x [RMSNorm, causal MHA, add,
    RMSNorm, SiLU-gated MLP, add], final RMSNorm, untied lm_head."""
    head_dim = d_model // heads
    tokens = keras.Input((seq,), dtype="int32", name="tokens")
    h = L.Embedding(vocab, d_model, name="embed")(tokens)
    for i in range(n_blocks):
        b = f"block_{i}"
        n = L.RMSNormalization(name=f"{b}_attn_norm")(h)
        q = L.EinsumDense("bsd,dnh->bsnh", (seq, heads, head_dim), name=f"{b}_q")(n)
        k = L.EinsumDense("bsd,dnh->bsnh", (seq, heads, head_dim), name=f"{b}_k")(n)
        v = L.EinsumDense("bsd,dnh->bsnh", (seq, heads, head_dim), name=f"{b}_v")(n)
        a = CausalSelfAttention(name=f"{b}_attn")(q, k, v)
        o = L.EinsumDense("bsnh,nhd->bsd", (seq, d_model), name=f"{b}_o")(a)
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


# --------------------------------------------------------------------------
# builders


def decoder(n_blocks=21, d_model=1024, heads=16, ff=2816, vocab=32000, seq=1024,
            dtype_policy="mixed_bfloat16", learning_rate=1e-4, name="decoder"):
    """Full fine-tune decoder: 335,326,208 parameters at the defaults, all
    trainable, float32 variables with bfloat16 compute (mixed_bfloat16),
    Adam(1e-4), SparseCategoricalCrossentropy(from_logits=True)."""
    with _policy(dtype_policy):
        model = _decoder_graph(n_blocks, d_model, heads, ff, vocab, seq, name)
    return _compile(model, learning_rate)


def decoder_lora(n_blocks=21, d_model=1024, heads=16, ff=2816, vocab=32000,
                 seq=1024, rank=8, dtype_policy="bfloat16", learning_rate=1e-4,
                 name="decoder_lora"):
    """The same decoder with bfloat16 variables and compute; every layer
    frozen, then ``enable_lora(rank)`` on ``block_i_q`` and ``block_i_v``.
    Only their ``lora_kernel_a`` / ``lora_kernel_b`` (float32, as Keras
    makes them) are trainable."""
    with _policy(dtype_policy):
        model = _decoder_graph(n_blocks, d_model, heads, ff, vocab, seq, name)
        targets = {f"block_{i}_{p}" for i in range(n_blocks) for p in ("q", "v")}
        for layer in model.layers:
            if layer.name in targets:
                layer.enable_lora(rank)
            elif layer.weights:
                layer.trainable = False
    return _compile(model, learning_rate)


def encoder(n_blocks=12, d_model=768, heads=12, ff=3072, vocab=30522, seq=512,
            dtype_policy="mixed_bfloat16", learning_rate=1e-4, name="encoder"):
    """BERT-base-like post-norm encoder (no token types): token + learned
    position embeddings, LayerNorm, n x [MultiHeadAttention (not causal), add,
    LayerNorm, GELU MLP, add, LayerNorm], then a tanh pooler on the first
    token. Output (batch, d_model), so predict returns little data.
    mixed_bfloat16 by default. Compiled (Adam + sparse CE) only so that it
    is a compiled model; it is used with predict."""
    with _policy(dtype_policy):
        tokens = keras.Input((seq,), dtype="int32", name="tokens")
        h = L.Embedding(vocab, d_model, name="token_embed")(tokens)
        h = PositionEmbedding(seq, name="position_embed")(h)
        h = L.LayerNormalization(epsilon=1e-12, name="embed_norm")(h)
        for i in range(n_blocks):
            b = f"block_{i}"
            a = L.MultiHeadAttention(heads, d_model // heads, name=f"{b}_attn")(h, h)
            h = L.LayerNormalization(epsilon=1e-12, name=f"{b}_attn_norm")(
                L.Add(name=f"{b}_attn_res")([h, a]))
            m = L.Dense(ff, activation="gelu", name=f"{b}_ffn_in")(h)
            m = L.Dense(d_model, name=f"{b}_ffn_out")(m)
            h = L.LayerNormalization(epsilon=1e-12, name=f"{b}_ffn_norm")(
                L.Add(name=f"{b}_ffn_res")([h, m]))
        pooled = L.Dense(d_model, activation="tanh", name="pooler")(
            FirstToken(name="cls")(h))
        model = keras.Model(tokens, pooled, name=name)
    return _compile(model, learning_rate)


def dict_model(n_blocks=2, d_model=256, heads=4, ff=1024, vocab=32000, seq=128,
               num_classes=4, dtype_policy="mixed_bfloat16", learning_rate=1e-4,
               name="dict_model"):
    """A classifier whose input is a dict ``{"token_ids": (B, T) int32,
    "padding_mask": (B, T) int32}`` (keras-hub's backbone convention):
    embedding, n pre-norm blocks of MultiHeadAttention (keys masked by
    padding_mask) and GELU MLP, masked mean pool, Dense head to logits."""
    with _policy(dtype_policy):
        token_ids = keras.Input((seq,), dtype="int32", name="token_ids")
        padding_mask = keras.Input((seq,), dtype="int32", name="padding_mask")
        attn_mask = ops.cast(ops.expand_dims(padding_mask, 1), "bool")  # (B, 1, T)
        h = L.Embedding(vocab, d_model, name="embed")(token_ids)
        for i in range(n_blocks):
            b = f"block_{i}"
            n = L.LayerNormalization(name=f"{b}_attn_norm")(h)
            a = L.MultiHeadAttention(heads, d_model // heads, name=f"{b}_attn")(
                n, n, attention_mask=attn_mask)
            h = L.Add(name=f"{b}_attn_res")([h, a])
            n = L.LayerNormalization(name=f"{b}_mlp_norm")(h)
            m = L.Dense(ff, activation="gelu", name=f"{b}_up")(n)
            m = L.Dense(d_model, name=f"{b}_down")(m)
            h = L.Add(name=f"{b}_mlp_res")([h, m])
        h = L.LayerNormalization(name="final_norm")(h)
        pooled = MaskedMeanPool(name="pool")(h, padding_mask)
        logits = L.Dense(num_classes, name="head")(pooled)
        model = keras.Model({"token_ids": token_ids, "padding_mask": padding_mask},
                            logits, name=name)
    return _compile(model, learning_rate)


def hub_gpt2(n_layers=12, d_model=768, heads=12, ff=3072, vocab=50257, seq=1024,
             dtype_policy="mixed_bfloat16", learning_rate=1e-4, name="hub_gpt2"):
    """keras-hub's own ``GPT2CausalLM`` (no preprocessor) on a
    ``GPT2Backbone`` built from ``gpt2_base_en``'s published configuration
    (124,439,808 parameters at the defaults), float32 variables with bfloat16
    compute, Adam(1e-4) and sparse cross-entropy on the logits; its input is
    keras-hub's ``{"token_ids", "padding_mask"}`` dict. keras-hub is imported
    here, so the other builders need only keras; it runs without TensorFlow."""
    import keras_hub

    with _policy(dtype_policy):
        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=vocab, num_layers=n_layers, num_heads=heads, hidden_dim=d_model,
            intermediate_dim=ff, max_sequence_length=max(seq, 1024), name=f"{name}_backbone")
        model = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None, name=name)
    return _compile(model, learning_rate)


def hub_gpt2_default(n_layers=12, d_model=768, heads=12, ff=3072, vocab=50257, seq=1024,
                     dtype_policy="mixed_bfloat16", name="hub_gpt2_default"):
    """keras-hub's ``GPT2CausalLM`` at ``gpt2_base_en``'s configuration without
    dropout, compiled as keras-hub compiles a task by default (its constructor
    calls ``compile()``: Adam(2e-5), sparse cross-entropy on the logits and a
    SparseCategoricalAccuracy weighted metric): the model a user gets from
    keras-hub, and the one ``shardviz fit hub:gpt2_base_en`` builds."""
    import keras_hub

    with _policy(dtype_policy):
        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=vocab, num_layers=n_layers, num_heads=heads, hidden_dim=d_model,
            intermediate_dim=ff, max_sequence_length=max(seq, 1024), dropout=0.0,
            name=f"{name}_backbone")
        return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None, name=name)


def decoder_remat(n_blocks=21, d_model=1024, heads=16, ff=2816, vocab=32000, seq=1024,
                  dtype_policy="mixed_bfloat16", learning_rate=1e-4, name="decoder_remat"):
    """``decoder()`` with every layer built inside ``keras.RematScope(mode="full")``:
    the backward pass recomputes each layer's activations."""
    with _policy(dtype_policy), keras.RematScope(mode="full"):
        model = _decoder_graph(n_blocks, d_model, heads, ff, vocab, seq, name)
    return _compile(model, learning_rate)


def hub_llama_lora(n_layers=16, d_model=2048, heads=32, kv_heads=8, ff=8192, vocab=128256,
                   seq=1024, rank=4, dtype_policy="bfloat16", learning_rate=1e-4,
                   name="hub_llama_lora"):
    """keras-hub's ``Llama3CausalLM`` at ``llama3.2_1b``'s published
    configuration (tied embeddings, 1.24B parameters), bfloat16, with
    ``backbone.enable_lora(rank)`` (keras-hub's own LoRA: the query and value
    projections), Adam(1e-4), sparse cross-entropy on the logits."""
    import keras_hub

    with _policy(dtype_policy):
        backbone = keras_hub.models.Llama3Backbone(
            vocabulary_size=vocab, num_layers=n_layers, num_query_heads=heads,
            num_key_value_heads=kv_heads, hidden_dim=d_model, intermediate_dim=ff,
            rope_max_wavelength=500000, tie_word_embeddings=True, name=f"{name}_backbone")
        model = keras_hub.models.Llama3CausalLM(backbone=backbone, preprocessor=None, name=name)
        backbone.enable_lora(rank)
    return _compile(model, learning_rate)


def hub_qwen(n_layers=24, d_model=896, heads=14, kv_heads=2, ff=4864, vocab=151936, seq=1024,
             dtype_policy="mixed_bfloat16", learning_rate=1e-4, name="hub_qwen"):
    """keras-hub's ``QwenCausalLM`` at ``qwen2.5_0.5b_en``'s published
    configuration (tied embeddings, 494M parameters), float32 variables with
    bfloat16 compute, every weight trained with Adam(1e-4)."""
    import keras_hub

    with _policy(dtype_policy):
        backbone = keras_hub.models.QwenBackbone(
            vocabulary_size=vocab, num_layers=n_layers, num_query_heads=heads,
            num_key_value_heads=kv_heads, hidden_dim=d_model, intermediate_dim=ff,
            rope_max_wavelength=1000000, tie_word_embeddings=True, name=f"{name}_backbone")
        model = keras_hub.models.QwenCausalLM(backbone=backbone, preprocessor=None, name=name)
    return _compile(model, learning_rate)


BUILDERS = {"decoder": decoder, "decoder_lora": decoder_lora,
            "encoder": encoder, "dict_model": dict_model, "hub_gpt2": hub_gpt2,
            "decoder_remat": decoder_remat, "hub_llama_lora": hub_llama_lora,
            "hub_gpt2_default": hub_gpt2_default,
            "hub_qwen": hub_qwen}


# --------------------------------------------------------------------------
# data (NumPy, int32)


def decoder_data(batch, seq=1024, vocab=32000, seed=0):
    """x: (batch, seq) int32 token ids; y: (batch, seq) int32 next tokens."""
    rng = np.random.default_rng(seed)
    t = rng.integers(0, vocab, size=(batch, seq + 1), dtype=np.int32)
    return t[:, :-1].copy(), t[:, 1:].copy()


def encoder_data(batch, seq=512, vocab=30522, seed=0):
    """x: (batch, seq) int32 token ids (predict needs no y)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, size=(batch, seq), dtype=np.int32)


def dict_data(batch, seq=128, vocab=32000, num_classes=4, seed=0):
    """x: {"token_ids": (batch, seq) int32, "padding_mask": (batch, seq) int32
    with 1 on a random-length prefix of at least 1}; y: (batch,) int32."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, size=(batch, seq), dtype=np.int32)
    lengths = rng.integers(1, seq + 1, size=(batch,))
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = ids * mask
    y = rng.integers(0, num_classes, size=(batch,), dtype=np.int32)
    return {"token_ids": ids, "padding_mask": mask}, y


def hub_data(batch, seq=1024, vocab=50257, seed=0):
    """keras-hub's causal-LM batch: x: {"token_ids": (batch, seq) int32,
    "padding_mask": (batch, seq) int32, all ones}; y: (batch, seq) int32 next
    tokens."""
    x, y = decoder_data(batch, seq, vocab, seed)
    return {"token_ids": x, "padding_mask": np.ones_like(x)}, y


DATA = {"decoder": decoder_data, "decoder_lora": decoder_data, "decoder_remat": decoder_data,
        "encoder": encoder_data, "dict_model": dict_data, "hub_gpt2": hub_data,
        "hub_llama_lora": hub_data, "hub_qwen": hub_data, "hub_gpt2_default": hub_data}


def data_for(builder, batch, kwargs=None, seed=0):
    """(x, y) for ``BUILDERS[builder](**kwargs)`` at ``batch`` rows; y is
    None for the encoder."""
    kwargs = kwargs or {}
    seq = kwargs.get("seq")
    vocab = kwargs.get("vocab")
    fn = DATA[builder]
    extra = {}
    if seq is not None:
        extra["seq"] = seq
    if vocab is not None:
        extra["vocab"] = vocab
    if builder == "dict_model" and "num_classes" in kwargs:
        extra["num_classes"] = kwargs["num_classes"]
    out = fn(batch, seed=seed, **extra)
    return (out, None) if builder == "encoder" else out


if __name__ == "__main__":
    for n, fn in BUILDERS.items():
        m = fn(**TINY[n])
        print(n, m.count_params(), "trainable",
              sum(int(np.prod(v.shape)) for v in m.trainable_variables))
