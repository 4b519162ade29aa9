from dataclasses import asdict, dataclass, field

import pytest

from rckit.config import apply_overrides, from_dict


@dataclass
class Inner:
    lr: float = 1e-3
    betas: tuple = (0.8, 0.999)


@dataclass
class Outer:
    name: str = "x"
    layers: int = 2
    bias: bool = True
    path: str | None = None
    opt: Inner = field(default_factory=Inner)


def test_overrides_coerce_types_and_nest():
    c = apply_overrides(Outer(), ["layers=4", "bias=false", "opt.lr=5e-4", "path=none", "opt.betas=[0.9, 0.98]"])
    assert (c.layers, c.bias, c.opt.lr, c.path, c.opt.betas) == (4, False, 5e-4, None, (0.9, 0.98))
    assert Outer().layers == 2  # the original is untouched


@pytest.mark.parametrize(
    "bad, msg", [("layers=two", "expected int"), ("nope=1", "unknown setting"), ("layers", "key=value")]
)
def test_bad_overrides_name_the_field(bad, msg):
    with pytest.raises(ValueError, match=msg):
        apply_overrides(Outer(), [bad])


def test_round_trip_through_dict():
    c = apply_overrides(Outer(), ["opt.lr=0.1"])
    assert from_dict(Outer, asdict(c)) == c
    with pytest.raises(ValueError, match="unknown fields"):
        from_dict(Outer, {"zzz": 1})
