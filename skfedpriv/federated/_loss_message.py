"""How a protocol message names its loss: the loss's registry spec, flat.

A loss's spec (:meth:`skfedpriv._loss.LossSpec.spec`,
``{"loss": name, "params": {field: value}}``) travels as the request entries
``loss`` (the registry name) and ``loss-<field>`` (one per parameter, e.g.
``loss-q``): flat scalars, as every transport carries them (a Flower
``ConfigRecord`` holds no nested dict), so a loss sent over the protocol
has scalar parameters. The site rebuilds the loss through
the registry (:func:`skfedpriv._loss.make_loss`); it never runs code the
request names.
"""

from .._loss import as_loss, make_loss

_PREFIX = "loss-"


def loss_entries(loss):
    """The request entries naming ``loss`` (a loss object or genDWD's ``q``)."""
    spec = as_loss(loss).spec()
    return {"loss": spec["loss"], **{_PREFIX + k: v for k, v in spec["params"].items()}}


def request_loss(request):
    """The loss a request names, rebuilt through the registry (ValueError if
    it names no registered loss or parameters the loss does not take)."""
    params = {k[len(_PREFIX):]: v for k, v in request.items() if k.startswith(_PREFIX)}
    return make_loss({"loss": request.get("loss"), "params": params})
