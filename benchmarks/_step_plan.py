"""``--steps``: run the private refinement with another per-stage step plan.

The plan is a module constant of
:mod:`skfedpriv.linear_model._inference_private` (``GRADIENT_STEPS``); this
sets it in the running process, so it holds for ``--n-jobs 1`` only (joblib's
worker processes import the shipped plan). A plan with the same total keeps
the privacy charge (``inference_releases`` counts ``ROUNDS``, their sum).
"""

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv.linear_model import _inference_private


def add_steps_argument(parser):
    """Add ``--steps S1 S2 S3`` to an ``argparse`` parser."""
    parser.add_argument("--steps", type=int, nargs="+", default=None,
                        help="gradient steps per curvature stage (default: the shipped "
                             f"{' '.join(map(str, _inference_private.GRADIENT_STEPS))}); "
                             "same total only, --n-jobs 1 only")


def apply_steps(args):
    """Set the plan of ``args.steps`` (if given); returns a file-name tag ('' if not)."""
    if not args.steps:
        return ""
    steps = tuple(args.steps)
    if (len(steps) != _inference_private.CURVATURE_RELEASES
            or sum(steps) != _inference_private.ROUNDS or args.n_jobs != 1):
        raise SystemExit(f"--steps needs {_inference_private.CURVATURE_RELEASES} numbers "
                         f"summing to {_inference_private.ROUNDS} and --n-jobs 1")
    _inference_private.GRADIENT_STEPS = steps
    return "steps" + "_".join(map(str, steps))
