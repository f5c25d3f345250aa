"""The other half of test_hub_backbones.py's map check (every other
backbone, from the second), in a file of its own: pytest's workers take a
file each, and the check takes about 11 minutes of this machine for every
backbone."""

import pytest
from needs import HAVE_HUB
from test_hub_backbones import check_the_map

from shardviz import hub as hb

pytestmark = pytest.mark.skipif(not HAVE_HUB, reason="keras-hub is not installed")


@pytest.mark.parametrize("name", hb.BACKBONES[1::2])
def test_the_map_builds_under_keras_and_is_no_worse_than_the_shipped_one(name):
    check_the_map(name)
