"""A calibration as files other tools open: the corrected URDF, calibration.yaml, the HTML report."""
