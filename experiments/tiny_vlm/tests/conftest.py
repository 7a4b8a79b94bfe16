import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXPERIMENTS = os.path.dirname(os.path.dirname(HERE))
if EXPERIMENTS not in sys.path:
    sys.path.insert(0, EXPERIMENTS)

torch.set_num_threads(1)


@pytest.fixture
def env():
    """Environment for child processes: the package and circlerope importable."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([EXPERIMENTS] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p])
    e.setdefault("OMP_NUM_THREADS", "1")
    return e
