"""The program ``model.fit`` runs, compiled outside shardviz: the truth the
train-step tests compare shardviz's reports with."""

import jax

from shardviz._adapters import keras as keras_adapter


def fit_and_compile(dist, model, x, y):
    """Train ``model`` one step with ``fit`` under ``dist`` (in its scope),
    then lower and compile the jitted step fit ran, on the model's state."""
    model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
    step = keras_adapter.keras_train_function(model)
    state = ([v.value for v in model.trainable_variables],
             [v.value for v in model.non_trainable_variables],
             [v.value for v in model.optimizer.variables],
             [v.value for v in model.metrics_variables])
    data = (jax.device_put(x, dist.get_data_layout(x.shape).backend_layout),
            jax.device_put(y, dist.get_data_layout(y.shape).backend_layout))
    return step.lower(state, data).compile()


def compile_train_step_for_tpu(model, x_shape, y_shape, topology="v5e:1x1"):
    """Lower and compile the train step ``model.fit`` runs (``model`` already
    trained one step on the host, so its optimizer is built) for one TPU
    chip of ``topology``, with JAX's own topology and the model's state and
    a batch of ``x_shape`` / ``y_shape`` (float32) replicated on it. Raises
    what the TPU compiler raises (``RESOURCE_EXHAUSTED`` when it does not
    fit)."""
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    dims = tuple(int(d) for d in topology.split(":")[1].split("x")) + (1,)
    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology,
                                           chips_per_host_bounds=dims[:3]).devices
    on_chip = NamedSharding(Mesh(devices[:1], ("batch",)), PartitionSpec())

    def spec(v):
        return jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=on_chip)

    step = keras_adapter.keras_train_function(model)
    state = tuple([spec(v) for v in group] for group in (
        model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
        model.metrics_variables))
    data = (jax.ShapeDtypeStruct(x_shape, "float32", sharding=on_chip),
            jax.ShapeDtypeStruct(y_shape, "float32", sharding=on_chip))
    return step.lower(state, data).compile()
