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
