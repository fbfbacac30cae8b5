"""Bringing real measurement files into a session.

One module per concern: ``units`` (conversion and sanity ranges), ``tables`` (delimited text with
row-level errors), ``joint_logs`` (joint CSVs), ``tracker_exports`` (reflector point dialects),
``poses6d`` (6-DoF tracked poses), ``rosbag`` (JointState from ROS 2 bags), ``join`` (matching
measurements to poses by name or time stamp) and ``assemble`` (writing the session folder).
The entry points are :func:`capture.importers.assemble.import_tracker` and
:func:`capture.importers.assemble.import_rosbag`; see docs/importing.md.
"""
