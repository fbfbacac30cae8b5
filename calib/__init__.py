"""The arm's kinematics and their fit, in rooms that import one way:

    model       parameter groups, the vectorised chain, the error model
    sensors     observation blocks and the sensors that make them (tracker points, probe poses,
                board corners), start values, figures
    fit         the robust solver, identifiability, pose-set checks, hold-out and folds
    deflection  torques the joints hold, the learned residual, the choice between models
    io          robot.urdf, calibration.yaml, report.html
    calibration.py  the result type (every kind of data), prediction, save and load
    calibrator.py   Calibrator(...).fit(sessions) -> Calibration
    workflows   validation, recalibration, pose planning, compensation, ISO 9283 audits

    from calib.calibrator import Calibrator
    calibration = Calibrator().fit([session])
"""
