"""Comparing a fit with a simulated session's truth. Evaluation only: reads ``truth/``, which no fit may."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from calib.error_model import ErrorModel
from rigs.transforms import invert, log6


def true_parameter_vector(model: ErrorModel, session: Path, sensor: str = "s0") -> np.ndarray:
    """The simulated truth of ``session`` in ``model``'s parameter layout (P,)."""
    truth = json.loads((Path(session) / "truth" / "parameters.json").read_text())
    theta = np.zeros(model.size)
    for i, joint in enumerate(model.chain.joint_names):
        theta[6 * i:6 * i + 6] = truth["joints"][joint]["placement_delta"]
        theta[model.zero_slice.start + i] = truth["joints"][joint]["zero_offset"]
    reference = model.reference_tracker_T_base[sensor]
    theta[model.sensor_slices[sensor]] = log6(invert(reference) @ np.array(truth["tracker_T_base"]))
    for name, block in model.target_slices.items():
        theta[block] = truth["targets"][name]
    return theta


def combination_z_scores(calibration, session: Path) -> np.ndarray:
    """|true - fitted| / reported standard deviation (r,) for each identifiable combination.

    Needs a calibration fitted in this process (``calibration.solve``), on one session of the rig.
    """
    result, model = calibration.solve, calibration.error_model
    difference = result.identifiability.combinations @ (true_parameter_vector(model, session) - result.theta)
    return np.abs(difference) / np.sqrt(np.diag(result.combination_covariance))
