"""Sensors and their observation blocks: what each kind of measurement predicts from the groups it reads.

Tracker points (``tracker_points``), 6-DoF probe poses (``tracker_poses``) and board corners seen
by cameras (``board_corners``). Each module has the block (residuals and analytic Jacobian) and the
sensor (how a session's files become blocks, start values, figures); ``calib.sensors.registry``
lists the sensors a session is searched for.
"""
