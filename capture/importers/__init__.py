"""Bringing real measurement files into a session.

One module per concern: ``units`` (conversion and sanity ranges), ``tables`` (delimited text with
row-level errors), ``joint_logs`` (joint CSVs), ``tracker_exports`` (reflector point dialects),
``poses6d`` (6-DoF tracked poses), ``rosbag`` (JointState from ROS 2 bags), ``join`` (matching
measurements to poses by name or time stamp) and ``assemble`` (writing the session folder).
Camera recordings: ``ros_images`` (Image, CompressedImage, CameraInfo as arrays),
``rosbag_cameras`` (which topics are which camera), ``stills`` (where the arm stood still),
``tf_static`` (camera poses), ``camera_import`` (bags into a camera session) and
``image_folder`` (folders of images).
The entry points are :func:`capture.importers.assemble.import_tracker`,
:func:`capture.importers.assemble.import_rosbag`,
:func:`capture.importers.camera_import.import_rosbag_cameras` and
:func:`capture.importers.image_folder.import_image_folder`; see docs/importing.md and docs/cameras.md.
"""
