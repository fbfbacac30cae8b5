"""sensor_msgs/JointState from ROS 2 bags (sqlite3 or MCAP), read with ``rosbags``: no ROS needed.

Joints are matched by name, never by position in the message: a message may list the joints in
any order and carry others (a gripper's); every joint of the chain must be in every message.
Positions are rad (m for prismatic joints) as the message defines them. The time of a message is
its ``header.stamp``, or the bag's receive time when the stamp is zero.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capture.importers.joint_logs import ArmJoints, JointLog
from capture.session import pose_id
from rigs.errors import InputError, first_line

JOINT_STATE = "sensor_msgs/msg/JointState"


def open_bag(bag: Path):
    """An open ``rosbags`` AnyReader of a bag folder (sqlite3 or MCAP); the caller closes it.
    InputError when the folder is missing or not a bag."""
    from rosbags.highlevel import AnyReader
    from rosbags.highlevel.anyreader import AnyReaderError

    bag = Path(bag)
    if not bag.exists():
        raise InputError(f"{bag}: bag not found.")
    try:
        reader = AnyReader([bag])
        reader.open()
    except (AnyReaderError, OSError, ValueError, KeyError) as error:
        raise InputError(f"{bag}: not a readable ROS 2 bag ({first_line(error)}).") from None
    return reader


def read_joint_states(bag: Path, topic: str, chain: ArmJoints) -> JointLog:
    """Every JointState message of ``topic``, in time order; pose ids ``p0000``... by message order.

    ``lines`` of the result are message numbers (1-based, in bag order) for error messages.
    """
    bag = Path(bag)
    reader = open_bag(bag)
    where = f"{bag}: topic {topic}"
    try:
        connections = [c for c in reader.connections if c.topic == topic]
        if not connections:
            topics = sorted({c.topic for c in reader.connections})
            raise InputError(f"{bag}: no topic {topic!r} (the bag has {', '.join(topics) or 'no topics'}).")
        wrong = [c.msgtype for c in connections if c.msgtype != JOINT_STATE]
        if wrong:
            raise InputError(f"{where} carries {wrong[0]}, expected {JOINT_STATE}.")
        stamps, q, efforts, numbers = [], [], [], []
        has_effort = True
        for number, (connection, bag_time, raw) in enumerate(reader.messages(connections=connections), start=1):
            try:
                message = reader.deserialize(raw, connection.msgtype)
            except Exception as error:  # a corrupt message: any decoder error means bad input
                raise InputError(f"{where}: message {number} cannot be decoded ({type(error).__name__}).") from None
            names = list(message.name)
            position = np.asarray(message.position, dtype=float)
            if len(position) != len(names):
                raise InputError(f"{where}: message {number} has {len(names)} names but {len(position)} positions.")
            if len(set(names)) != len(names):
                raise InputError(f"{where}: message {number} names a joint twice.")
            index = {name: i for i, name in enumerate(names)}
            missing = [name for name in chain.names if name not in index]
            if missing:
                raise InputError(f"{where}: message {number} has no joint {missing[0]!r} (it names "
                                 f"{', '.join(names) or 'no joints'}).")
            values = position[[index[name] for name in chain.names]]
            if not np.isfinite(values).all():
                bad = chain.names[int(np.flatnonzero(~np.isfinite(values))[0])]
                raise InputError(f"{where}: message {number}: joint {bad!r} has position {values[chain.names.index(bad)]}.")
            effort = np.asarray(message.effort, dtype=float)
            if len(effort) == len(names) and np.isfinite(effort[[index[n] for n in chain.names]]).all():
                efforts.append(effort[[index[name] for name in chain.names]])
            else:
                has_effort = False  # efforts are kept only when every message has them
            stamp = message.header.stamp.sec + message.header.stamp.nanosec * 1e-9
            stamps.append(stamp if stamp > 0 else bag_time * 1e-9)
            q.append(values)
            numbers.append(number)
    finally:
        reader.close()
    if not q:
        raise InputError(f"{where} has no messages.")
    order = np.argsort(np.array(stamps), kind="stable")
    q_array = np.array(q)[order]
    effort_map = {}
    if has_effort:
        effort_array = np.array(efforts)[order]
        effort_map = {name: effort_array[:, j] for j, name in enumerate(chain.names)}
    return JointLog(f"{bag} ({topic})", [pose_id(i) for i in range(len(q))], [numbers[i] for i in order], q_array,
                    np.array(stamps)[order], None, effort_map, {})
