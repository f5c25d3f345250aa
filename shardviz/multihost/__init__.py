"""``shardviz verify``: prove a plan on JAX's real multi-process runtime.

:func:`verify` starts N local processes on 127.0.0.1, each owning its share
of the simulated devices, as N hosts would. Each runs the plan's exported
multi-host code (:meth:`~shardviz.Plan.to_python` with ``processes=N``)
unchanged, builds the model and runs a jitted forward pass on its rows of
the batch (:mod:`shardviz.multihost.worker`). Then every shard each host holds,
of every variable and output, is compared with shardviz's prediction for
that host, and the gathered output with a single-process run of the same
model and weights. With ``train_step=True`` each also runs one ``model.fit``
step on its rows, and the loss and every updated variable are compared with
the same step in one process (:mod:`.train_check`). Every process started is stopped: on success, on
failure, on a time-out and on Ctrl-C.
"""

from __future__ import annotations

from .comparison import Verification, compare_shards, predicted_shards
from .processes import DEFAULT_TIMEOUT, check_timeout, free_port
from .verify import SEED_HINT, DifferentWeights, PlanRefused, TimedOut, verify

__all__ = ["DEFAULT_TIMEOUT", "SEED_HINT", "DifferentWeights", "PlanRefused", "TimedOut",
           "Verification", "check_timeout", "compare_shards", "free_port",
           "predicted_shards", "verify"]
