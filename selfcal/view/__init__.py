"""Seeing a result in 3D: which kind a folder holds (``kinds``) and the live viewer (``live``).

The scenes of calibrations, self-models and exports are built beside their loaders
(``calib.io.scene``, ``selfmodel.inspect.scene``, ``selfmodel.export.scene``), so that the reports
those rooms write can embed the same scene (``rigs.scene_html``); a fleet's is ``fleet``, here.
"""
