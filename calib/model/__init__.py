"""The arm's error model: parameter groups, the vectorised serial chain, and the model that joins them.

Nothing here knows about trackers or cameras: sensors (``calib.sensors``) read the groups they
declare, and the fit (``calib.fit``) sees one flat parameter vector.
"""
