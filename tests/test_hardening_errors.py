"""Error messages from the hardening issue: each names the argument and the fix."""

import pytest
import torch

import warpgauge as wg

from .conftest import DEVICE


def test_add_rms_norm_on_a_0d_input_says_it_needs_a_last_dimension():
    x = torch.tensor(1.5).to(DEVICE)
    w = torch.ones(1).to(DEVICE)
    with pytest.raises(ValueError, match="x is 0-D.*at least one dimension") as e:
        wg.add_rms_norm(x, x.clone(), w)
    assert "weight" not in str(e.value)
