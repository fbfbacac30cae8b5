"""Collision geometry for planners from a self-model: the link bodies and their sources, carving,
margin, separation, sphere covers, and the writers (URDF, SRDF, cuRobo, the report). Never reads a
simulated truth: evaluation/ measures an export against one."""
