"""The sensors a session is searched for, the primary one first (its figures lead the summaries)."""

from __future__ import annotations

from calib.sensors.board_corners import BoardCornerSensor
from calib.sensors.sensor import Sensor
from calib.sensors.tracker_points import TrackerPointSensor
from calib.sensors.tracker_poses import TrackerPoseSensor

SENSORS: tuple[Sensor, ...] = (TrackerPointSensor(), TrackerPoseSensor(), BoardCornerSensor())
BY_NAME = {sensor.name: sensor for sensor in SENSORS}


def sensors_of(session) -> list[Sensor]:
    """The sensors whose data ``session`` holds, in priority order."""
    return [sensor for sensor in SENSORS if sensor.present(session)]
