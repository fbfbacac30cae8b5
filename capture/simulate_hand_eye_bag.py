"""A simulated hand-eye recording as a ROS 2 bag: photos of a ChArUco board with the robot's /tf.

The cell of :mod:`capture.simulate_hand_eye` (a board on the flange and a fixed camera, or a camera
on the flange and a board on the table), recorded the way a ROS cell records it (rosbags' writer,
no ROS): the arm stands ``hold_s`` seconds at each pose and moves to the next in ``move_s`` seconds
(a cosine profile, the rotation by slerp), while

- ``/camera/color/image_raw`` (``sensor_msgs/Image``, or ``/compressed``) and its ``camera_info``
  (plumb_bob, with the lens's distortion) stream at ``camera_rate`` Hz, in frame
  ``camera_color_optical_frame``, through the stands and the moves alike;
- ``/tf`` streams at ``tf_rate`` Hz, another rate and phase than the images, as
  robot_state_publisher sends it: ``base_link -> link_1`` (a turn about z and the shoulder
  height) and ``link_1 -> link_6`` (the rest of the arm), each with the message's stamp;
- ``/tf_static``: ``world -> base_link`` and ``link_6 -> tool0`` (the flange's fixed offset).

``tool0`` is the flange: ``--flange-frames base_link,tool0``. The /tf poses are the controller's:
each stand's reported flange pose carries its own error (``flange_sigma``, m and rad per axis), and
the photos show the true one. Photos are grey, rendered through the lens with light, blur and
noise (:func:`capture.simulate_hand_eye.render`) at ``size`` with the intrinsics scaled to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capture.simulate_bag import START, _Messages, _smooth, _typestore, encode_colour
from capture.simulate_hand_eye import (DISTORTION_TRUE, HEIGHT, K_TRUE, WIDTH, _board_image, flange_poses,
                                       make_scene, perturb, render, views)
from rigs.errors import InputError
from rigs.transforms import axis_angle, interpolate_pose, invert

CAMERA_TOPIC = "/camera/color/image_raw"
CAMERA_INFO_TOPIC = "/camera/color/camera_info"
CAMERA_FRAME = "camera_color_optical_frame"
FLANGE_FRAMES = ("base_link", "tool0")
SHOULDER_HEIGHT_M = 0.333
LINK6_T_TOOL0 = np.array([[0.7071067811865476, -0.7071067811865476, 0.0, 0.0],
                          [0.7071067811865476, 0.7071067811865476, 0.0, 0.0],
                          [0.0, 0.0, 1.0, 0.107], [0.0, 0.0, 0.0, 1.0]])  # the flange: 45 degrees about z, 107 mm out


@dataclass
class HandEyeBagPlan:
    """Timing and images of the recording (s, Hz, px)."""

    hold_s: float = 0.5
    move_s: float = 0.3
    lead_s: float = 0.2  # recording before the first stand and after the last
    camera_rate: float = 4.0
    camera_phase_s: float = 0.013  # the first image's stamp after the start (a stand's middle: a triggered capture)
    tf_rate: float = 50.0
    tf_phase_s: float = 0.0037
    size: tuple[int, int] = (640, 480)
    colour: str = "rgb8"  # an encoding of capture.simulate_bag.COLOUR_KINDS


@dataclass
class FlangeTrajectory:
    """``base_T_tool0`` over time: ``poses`` (P, 4, 4) held over ``stands`` (P, 2) s, moved between."""

    poses: np.ndarray
    stands: np.ndarray
    move_s: float

    def at(self, t: float) -> np.ndarray:
        k = int(np.clip(np.searchsorted(self.stands[:, 0], t, side="right") - 1, 0, len(self.poses) - 1))
        if t <= self.stands[k, 1] or k + 1 == len(self.poses):
            return self.poses[k].copy()
        fraction = _smooth((t - self.stands[k, 1]) / self.move_s)
        return interpolate_pose(self.poses[k], self.poses[k + 1], fraction)

    def stand_at(self, t: float) -> int | None:
        inside = np.flatnonzero((self.stands[:, 0] <= t) & (t <= self.stands[:, 1]))
        return int(inside[0]) if len(inside) else None


def _arm_transforms(base_T_tool0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(base_T_link1, link1_T_link6) of a flange pose: link_1 turns towards the flange."""
    base_T_link1 = np.eye(4)
    base_T_link1[:3, :3] = axis_angle([0, 0, 1], float(np.arctan2(base_T_tool0[1, 3], base_T_tool0[0, 3])))
    base_T_link1[2, 3] = SHOULDER_HEIGHT_M
    return base_T_link1, invert(base_T_link1) @ base_T_tool0 @ invert(LINK6_T_TOOL0)


def record_hand_eye_bag(out: Path, board, setup: str, poses: int, seed: int, plan: HandEyeBagPlan | None = None,
                        flange_sigma: tuple[float, float] = (2e-4, np.radians(0.02)), partial: float = 0.25,
                        storage: str = "sqlite3") -> dict:
    """Write the bag (module docstring) to ``out``; returns its truth (for evaluation only): the
    true frames (as :func:`capture.simulate_hand_eye.write_recording` returns them), the
    ``true`` and ``reported`` :class:`FlangeTrajectory` of tool0 in base_link, and the stamps."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    plan = plan or HandEyeBagPlan()
    out = Path(out)
    if out.exists():
        raise InputError(f"{out}: already exists; choose another bag folder.")
    rng = np.random.default_rng(seed)
    scene = make_scene(setup, rng)
    camera_T_board = views(scene, poses, rng, partial)
    true_flange = flange_poses(scene, camera_T_board)
    reported_flange = perturb(true_flange, flange_sigma[0], flange_sigma[1], rng)
    period = plan.hold_s + plan.move_s
    starts = START + plan.lead_s + period * np.arange(poses)
    stands = np.stack([starts, starts + plan.hold_s], axis=1)
    true = FlangeTrajectory(true_flange, stands, plan.move_s)
    reported = FlangeTrajectory(reported_flange, stands, plan.move_s)
    end = stands[-1, 1] + plan.lead_s

    width, height = plan.size
    K = K_TRUE.copy()
    K[:2] *= np.array([[width / WIDTH], [height / HEIGHT]])
    texture = _board_image(board, 4000.0)

    def photo(t: float) -> np.ndarray:
        flange = true.at(t)
        if setup == "eye-to-hand":
            view = invert(scene.camera) @ flange @ scene.board
        else:
            view = invert(flange @ scene.camera) @ scene.board
        return render(board, view, K, DISTORTION_TRUE, rng, blur_px=rng.uniform(0.6, 1.2), noise_grey=0.0,
                      texture=texture, size=plan.size)

    messages = _Messages(_typestore())
    typestore = messages.ts
    TFMessage = typestore.types["tf2_msgs/msg/TFMessage"]
    events = [(float(t), "tf") for t in np.arange(START + plan.tf_phase_s, end, 1.0 / plan.tf_rate)]
    events += [(float(t), "photo") for t in np.arange(START + plan.camera_phase_s, end, 1.0 / plan.camera_rate)]
    events.sort()
    photo_stamps, tf_stamps = [], []
    still_photos: dict[int, np.ndarray] = {}  # stand -> its photo without noise: the scene stood still
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(out, version=8, storage_plugin=plugin) as writer:
        connections = {}

        def write(topic: str, message, msgtype: str, t: float) -> None:
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=typestore)
            writer.write(connections[topic], int(round(t * 1e9)), typestore.serialize_cdr(message, msgtype))

        # /tf_static first, as static publishers latch it at start-up.
        write("/tf_static", TFMessage([messages.transform(START, "world", FLANGE_FRAMES[0], np.eye(4)),
                                       messages.transform(START, "link_6", FLANGE_FRAMES[1], LINK6_T_TOOL0)]),
              TFMessage.__msgtype__, START)
        for t, kind in events:
            if kind == "tf":
                base_T_link1, link1_T_link6 = _arm_transforms(reported.at(t))
                write("/tf", TFMessage([messages.transform(t, FLANGE_FRAMES[0], "link_1", base_T_link1),
                                        messages.transform(t, "link_1", "link_6", link1_T_link6)]),
                      TFMessage.__msgtype__, t)
                tf_stamps.append(t)
                continue
            stand = true.stand_at(t)
            if stand is None:
                clean = photo(t)
            else:
                if stand not in still_photos:
                    still_photos = {stand: photo(t)}
                clean = still_photos[stand]
            grey = np.clip(np.round(clean + rng.normal(0.0, 2.0, clean.shape)), 0, 255).astype(np.uint8)
            message, msgtype = encode_colour(messages, t, CAMERA_FRAME, np.repeat(grey[..., None], 3, axis=2),
                                             plan.colour)
            write(CAMERA_TOPIC + ("/compressed" if plan.colour in ("jpeg", "png") else ""), message, msgtype, t)
            info = messages.camera_info(t, CAMERA_FRAME, width, height, K, DISTORTION_TRUE)
            write(CAMERA_INFO_TOPIC, info, info.__msgtype__, t)
            photo_stamps.append(t)
    return {"setup": setup, "camera": scene.camera, "board": scene.board,
            "camera_is": "base_T_camera" if setup == "eye-to-hand" else "flange_T_camera",
            "board_is": "flange_T_board" if setup == "eye-to-hand" else "base_T_board",
            "K": K, "distortion": DISTORTION_TRUE.copy(), "flange_frames": FLANGE_FRAMES,
            "true": true, "reported": reported, "photo_stamps": np.array(photo_stamps),
            "tf_stamps": np.array(tf_stamps), "flange_sigma": flange_sigma}
