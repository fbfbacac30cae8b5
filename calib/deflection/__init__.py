"""Deflection: what rigid kinematics cannot explain, for every sensor alike.

Joint compliance sits between the joint readings and the kinematics (the ``compliance`` group of
the error model; the torques each joint holds come from :mod:`calib.deflection.torques`); a learned
residual sits between the kinematics and the tip (:mod:`calib.deflection.residual_model`, trained
on per-pose tip residuals any sensor gives, :mod:`calib.deflection.learned`). The modes and the
automatic choice are in :mod:`calib.deflection.modes`.
"""
