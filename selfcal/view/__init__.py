"""Seeing a result in 3D: which kind a folder holds (``kinds``) and the live viewer (``live``).

The scenes themselves are built beside each result's loader (``calib.io.scene``,
``selfmodel.inspect.scene``, ``selfmodel.export.scene``, ``selfcal.fleet.scene``), so that the
reports those rooms write can embed the same scene (``rigs.scene_html``).
"""
