"""gpucmp.config: the TF32 switch reaches the core and is validated."""
import pytest

import gpucmp
from gpucmp import _core


def test_set_tf32_round_trips_to_the_core():
    before = gpucmp.config.get_tf32()
    try:
        gpucmp.config.set_tf32(False)
        assert gpucmp.config.get_tf32() is False and _core.get_allow_tf32() is False
        gpucmp.config.set_tf32(True)
        assert gpucmp.config.get_tf32() is True and _core.get_allow_tf32() is True
    finally:
        gpucmp.config.set_tf32(before)


def test_tf32_is_on_by_default_as_in_tensorflow():
    assert gpucmp.config.get_tf32() is True


@pytest.mark.parametrize("bad", ["yes", None, 1.5])
def test_set_tf32_rejects_non_booleans(bad):
    with pytest.raises(TypeError, match="set_tf32"):
        gpucmp.config.set_tf32(bad)
