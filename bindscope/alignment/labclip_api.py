"""``bindscope.labclip``: fit, evaluate, apply and load a LABCLIP map (see :mod:`bindscope.alignment.api`)."""

from bindscope.alignment.api import labclip_apply as apply
from bindscope.alignment.api import labclip_eval as eval
from bindscope.alignment.api import labclip_fit as fit

__all__ = ["fit", "eval", "apply", "load"]


def load(path):
    """Read a LABCLIP map file (:func:`bindscope.alignment.labclip.load_labclip`)."""
    from bindscope.alignment.labclip import load_labclip

    return load_labclip(path)
