"""What a test needs that ``make test`` installs and a bare checkout may lack:
libtpu (the TPU compiler) and keras-hub. Where ``SHARDVIZ_REQUIRE_TPU`` or
``SHARDVIZ_REQUIRE_HUB`` is set (``make test`` sets both), a missing one is an
error, not a skip."""

import importlib.util
import os

import pytest

HAVE_LIBTPU = importlib.util.find_spec("libtpu") is not None
if not HAVE_LIBTPU and os.environ.get("SHARDVIZ_REQUIRE_TPU"):
    raise RuntimeError("SHARDVIZ_REQUIRE_TPU is set but libtpu is not installed "
                       "(pip install -e '.[tpu]')")
HAVE_HUB = importlib.util.find_spec("keras_hub") is not None
if not HAVE_HUB and os.environ.get("SHARDVIZ_REQUIRE_HUB"):
    raise RuntimeError("SHARDVIZ_REQUIRE_HUB is set but keras-hub is not installed "
                       "(pip install -e '.[hub]')")

tpu = pytest.mark.skipif(not HAVE_LIBTPU, reason="libtpu is not installed")
"""Skips a test without the TPU compiler."""
