"""Trace: a jitted forward pass (or train step) of a model under a plan.

* :mod:`.forward` places the variables and inputs and traces the pass;
* :mod:`.activations` watches every layer output's sharding inside it;
* :mod:`.compile` compiles it and names the layer that failed;
* :mod:`.train_step` adds the backward pass and the optimizer update;
* :mod:`.hlo` reads collectives off the compiled program (:mod:`.replica_groups`
  the devices each runs over, :mod:`.scopes` the layer it came from);
* :mod:`.memory` reads XLA's memory analysis, :mod:`.sources` where each collective
  comes from, :mod:`.cost` what it costs, :mod:`.xla_log` what XLA logged.

Nothing here draws or prints; :class:`~shardviz.report.Report` holds the result.
"""

from .activations import Activation, uneven_dims
from .forward import Trace, trace
from .train_step import OptimizerVariable

__all__ = ["Activation", "OptimizerVariable", "Trace", "trace", "uneven_dims"]
