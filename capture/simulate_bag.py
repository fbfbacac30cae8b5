"""A ROS 2 bag of a simulated rig, written the way ROS drivers write one (rosbags' writer, no ROS).

The arm visits the given poses in order: it stands ``hold_s`` seconds at each and moves to the
next in ``move_s`` seconds (a cosine profile: it starts and stops gently). Recorded topics:

- ``/joint_states`` (``sensor_msgs/JointState``) at ``joint_rate`` Hz: the commanded angles, as an
  arm's encoders report them, with ``encoder_noise`` rad of noise; names in URDF order plus a
  gripper joint the chain does not have;
- per camera ``NAME``, at ``camera_rate`` Hz with a per-camera phase: ``/NAME/color/image_raw``
  and ``/NAME/aligned_depth_to_color/image_raw`` (or their ``/compressed`` and
  ``/compressedDepth`` transports), each with its ``camera_info``, in the encodings
  :class:`CameraEncoding` says; images are in frame ``NAME_color_optical_frame`` (or the body
  frame ``NAME_link``, as some drivers stamp them);
- ``/tf_static``: ``world -> base link`` and ``base link -> NAME_link -> NAME_color_optical_frame``.

The arm in the images is the rig's true arm at the angles it really reaches (sag and
repeatability noise drawn exactly as :func:`capture.simulate.capture_simulated` draws them for
the same seed and pose number), measured by each camera's depth model, fresh noise every frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rigs.errors import InputError
from rigs.simulator import Simulator
from rigs.spec import Rig
from rigs.transforms import invert, quat_xyzw

DEPTH_KINDS = ("16UC1", "32FC1", "16UC1-png", "32FC1-png")
COLOUR_KINDS = ("rgb8", "bgr8", "mono8", "jpeg", "png", None)
COMPRESSED_DEPTH_A = 100.0 * 101.0  # compressed_depth_image_transport's defaults: quantisation 100, depth_max 10 m
COMPRESSED_DEPTH_B = 1.0 - COMPRESSED_DEPTH_A / 10.0
START = 1_700_000_000.0


@dataclass(frozen=True)
class CameraEncoding:
    """How one camera's images go into the bag."""

    depth: str | None = "16UC1"  # one of DEPTH_KINDS, or None (no depth stream)
    colour: str | None = "rgb8"  # one of COLOUR_KINDS
    body_frame: bool = False  # stamp images with NAME_link (x forward) instead of the optical frame
    colour_delay_s: float = 0.0  # colour stamps later than depth stamps by this


@dataclass
class BagPlan:
    """Timing of the recording (s, Hz, rad)."""

    hold_s: float = 0.5
    move_s: float = 0.3
    joint_rate: float = 100.0
    camera_rate: float = 15.0
    encoder_noise: float = 1e-6
    lead_s: float = 0.3  # joint states before the first stand and after the last
    encodings: dict[str, CameraEncoding] = field(default_factory=dict)


def _typestore():
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_HUMBLE)


class _Messages:
    def __init__(self, typestore):
        self.ts = typestore
        self.types = typestore.types

    def header(self, stamp: float, frame: str):
        sec = int(np.floor(stamp))
        nanosec = int(round((stamp - sec) * 1e9))
        if nanosec >= 1_000_000_000:
            sec, nanosec = sec + 1, nanosec - 1_000_000_000
        return self.types["std_msgs/msg/Header"](self.types["builtin_interfaces/msg/Time"](sec, nanosec), frame)

    def image(self, stamp: float, frame: str, pixels: np.ndarray, encoding: str):
        Image = self.types["sensor_msgs/msg/Image"]
        height, width = pixels.shape[:2]
        data = np.ascontiguousarray(pixels).view(np.uint8).reshape(-1)
        return Image(self.header(stamp, frame), height, width, encoding, 0, data.size // height, data)

    def compressed(self, stamp: float, frame: str, data: bytes, form: str):
        return self.types["sensor_msgs/msg/CompressedImage"](self.header(stamp, frame), form,
                                                             np.frombuffer(data, dtype=np.uint8))

    def camera_info(self, stamp: float, frame: str, width: int, height: int, K: np.ndarray,
                    distortion: np.ndarray | None = None):
        """``distortion``: plumb_bob k1, k2, p1, p2, k3 of the unrectified image (default none)."""
        types = self.types
        P = np.hstack([K, np.zeros((3, 1))])
        distortion = np.zeros(5) if distortion is None else np.asarray(distortion, dtype=float)
        return types["sensor_msgs/msg/CameraInfo"](
            self.header(stamp, frame), height, width, "plumb_bob", distortion, K.astype(float).ravel(),
            np.eye(3).ravel(), P.ravel(), 0, 0, types["sensor_msgs/msg/RegionOfInterest"](0, 0, 0, 0, False))

    def transform(self, stamp: float, parent: str, child: str, parent_T_child: np.ndarray):
        types = self.types
        quaternion = quat_xyzw(parent_T_child[:3, :3])
        return types["geometry_msgs/msg/TransformStamped"](
            self.header(stamp, parent), child,
            types["geometry_msgs/msg/Transform"](types["geometry_msgs/msg/Vector3"](*parent_T_child[:3, 3].tolist()),
                                                 types["geometry_msgs/msg/Quaternion"](*quaternion.tolist())))


def encode_depth(messages: _Messages, stamp: float, frame: str, depth: np.ndarray, kind: str):
    """A depth image (H, W) m, 0 = none, as a ROS message of ``kind`` (DEPTH_KINDS): (message, msgtype)."""
    import cv2

    if kind == "16UC1":
        return messages.image(stamp, frame, np.round(depth * 1000).astype(np.uint16), "16UC1"), "sensor_msgs/msg/Image"
    if kind == "32FC1":
        values = np.where(depth > 0, depth, np.nan).astype(np.float32)  # REP 118: NaN is no reading
        return messages.image(stamp, frame, values, "32FC1"), "sensor_msgs/msg/Image"
    if kind == "16UC1-png":
        ok, png = cv2.imencode(".png", np.round(depth * 1000).astype(np.uint16))
        header = struct.pack("<iff", 0, 0.0, 0.0)
        return messages.compressed(stamp, frame, header + png.tobytes(), "16UC1; compressedDepth png"), \
            "sensor_msgs/msg/CompressedImage"
    if kind == "32FC1-png":
        with np.errstate(divide="ignore"):
            quantised = np.where(depth > 0, COMPRESSED_DEPTH_A / np.where(depth > 0, depth, 1.0) + COMPRESSED_DEPTH_B, 0)
        ok, png = cv2.imencode(".png", np.clip(np.round(quantised), 0, 65535).astype(np.uint16))
        header = struct.pack("<iff", 0, COMPRESSED_DEPTH_A, COMPRESSED_DEPTH_B)
        return messages.compressed(stamp, frame, header + png.tobytes(), "32FC1; compressedDepth png"), \
            "sensor_msgs/msg/CompressedImage"
    raise ValueError(kind)


def encode_colour(messages: _Messages, stamp: float, frame: str, rgb: np.ndarray, kind: str):
    import cv2

    if kind == "rgb8":
        return messages.image(stamp, frame, rgb, "rgb8"), "sensor_msgs/msg/Image"
    if kind == "bgr8":
        return messages.image(stamp, frame, np.ascontiguousarray(rgb[..., ::-1]), "bgr8"), "sensor_msgs/msg/Image"
    if kind == "mono8":
        return messages.image(stamp, frame, cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), "mono8"), "sensor_msgs/msg/Image"
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    if kind == "jpeg":
        ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 92])
        return messages.compressed(stamp, frame, data.tobytes(), "rgb8; jpeg compressed bgr8"), \
            "sensor_msgs/msg/CompressedImage"
    ok, data = cv2.imencode(".png", bgr)
    return messages.compressed(stamp, frame, data.tobytes(), "rgb8; png compressed bgr8"), "sensor_msgs/msg/CompressedImage"


def camera_topics(name: str, encoding: CameraEncoding) -> dict[str, str]:
    topics = {}
    if encoding.depth is not None:
        base = f"/{name}/aligned_depth_to_color/image_raw"
        topics["depth"] = base + ("/compressedDepth" if encoding.depth.endswith("-png") else "")
        topics["depth_info"] = f"/{name}/aligned_depth_to_color/camera_info"
    if encoding.colour is not None:
        base = f"/{name}/color/image_raw"
        topics["colour"] = base + ("/compressed" if encoding.colour in ("jpeg", "png") else "")
        topics["colour_info"] = f"/{name}/color/camera_info"
    return topics


def _smooth(fraction: float) -> float:
    return 0.5 - 0.5 * np.cos(np.pi * np.clip(fraction, 0.0, 1.0))


def record_bag(rig: Rig, q_poses: np.ndarray, seed: int, out: Path, plan: BagPlan | None = None,
               storage: str = "sqlite3", payload_kg: float = 0.0, progress=None, renderer=None) -> dict:
    """Write the bag (module docstring) for commanded poses ``q_poses`` (P, dof) rad; returns the
    timeline: {"stands": [(start, end)] s, "q_reached": (P, dof), "topics": {...}}.

    ``renderer(camera, q_reached)``: another renderer of the true scene than the simulator's (an
    object with ``depth`` (H, W) m, 0 where nothing was hit, and ``rgb`` (H, W, 3) uint8), so that a
    bag can be written by another path than the one the native sessions come from."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from rigs import urdf as urdf_io
    from rigs.truth import draw_truth, true_urdf_tree

    plan = plan or BagPlan()
    out = Path(out)
    if out.exists():
        raise InputError(f"{out}: already exists; choose another bag folder.")
    encodings = {camera.name: plan.encodings.get(camera.name, CameraEncoding()) for camera in rig.cameras}
    for name, encoding in encodings.items():
        if encoding.depth not in DEPTH_KINDS + (None,) or encoding.colour not in COLOUR_KINDS:
            raise InputError(f"camera {name!r}: unknown encoding {encoding}.")
    typestore = _typestore()
    messages = _Messages(typestore)
    arm = draw_truth(rig)
    import shutil
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="selfcal-bag-"))
    try:
        true_urdf = urdf_io.copy_self_contained(true_urdf_tree(rig, arm), rig.robot.urdf.parent, scratch,
                                                rig.robot.package_dirs)
        with Simulator(rig, arm, true_urdf) as sim:
            timeline = _write(sim, rig, np.asarray(q_poses, dtype=float), seed, out, plan, encodings, messages,
                              typestore, StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3,
                              Writer, payload_kg, progress, renderer)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return timeline


def _write(sim, rig, q_poses, seed, out, plan, encodings, messages, typestore, plugin, Writer, payload_kg,
           progress, renderer=None) -> dict:
    count, dof = q_poses.shape
    base = rig.robot.base_link
    q_reached = np.empty_like(q_poses)
    for number, q in enumerate(q_poses):
        rng = np.random.default_rng([seed, number, 0x0BE5])  # as capture_simulated draws it
        q_reached[number] = sim.reached_q(q, payload_kg) + rng.normal(0.0, rig.truth.repeatability / np.sqrt(dof), dof) \
            if rig.truth is not None else q
    period = plan.hold_s + plan.move_s
    stands = [(START + plan.lead_s + k * period, START + plan.lead_s + k * period + plan.hold_s) for k in range(count)]
    end = stands[-1][1] + plan.lead_s

    def state(t: float) -> tuple[np.ndarray, np.ndarray, int | None]:
        """Commanded and reached q at time t, and the stand index when standing."""
        if t <= stands[0][1]:
            return q_poses[0], q_reached[0], 0 if t >= stands[0][0] else None
        k = min(int((t - stands[0][0]) // period), count - 1)
        if t <= stands[k][1]:
            return q_poses[k], q_reached[k], k
        if k + 1 >= count:
            return q_poses[k], q_reached[k], None
        s = _smooth((t - stands[k][1]) / plan.move_s)
        return (q_poses[k] + s * (q_poses[k + 1] - q_poses[k]), q_reached[k] + s * (q_reached[k + 1] - q_reached[k]),
                None)

    render = renderer or sim.render_true
    joint_names = [*sim.chain.joint_names, "gripper_finger_joint"]
    noise_rng = np.random.default_rng([seed, 0x5EED])
    events = []  # (time, kind, payload)
    for t in np.arange(START, end, 1.0 / plan.joint_rate):
        events.append((float(t), "joints", None))
    for index, camera in enumerate(rig.cameras):
        phase = index / (len(rig.cameras) * plan.camera_rate)
        for t in np.arange(START + phase, end, 1.0 / plan.camera_rate):
            events.append((float(t), "frame", index))
    events.sort(key=lambda e: (e[0], e[1]))

    with Writer(out, version=8, storage_plugin=plugin) as writer:
        connections = {}

        def connection(topic: str, msgtype: str):
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=typestore)
            return connections[topic]

        def write(topic: str, message, msgtype: str, t: float) -> None:
            writer.write(connection(topic, msgtype), int(round(t * 1e9)),
                         typestore.serialize_cdr(message, msgtype))

        # /tf_static first, as the static publishers latch it at start-up.
        transforms = [messages.transform(START, "world", base, np.eye(4))]
        from capture.importers.tf_static import BODY_T_OPTICAL

        for camera in rig.cameras:
            base_T_body = camera.base_T_camera @ invert(BODY_T_OPTICAL)
            transforms.append(messages.transform(START, base, f"{camera.name}_link", base_T_body))
            transforms.append(messages.transform(START, f"{camera.name}_link", f"{camera.name}_color_optical_frame",
                                                 BODY_T_OPTICAL))
        TFMessage = typestore.types["tf2_msgs/msg/TFMessage"]
        write("/tf_static", TFMessage(transforms), TFMessage.__msgtype__, START)

        JointState = typestore.types["sensor_msgs/msg/JointState"]
        clean_cache: dict[tuple[int, int], object] = {}
        frames_done = 0
        frames_total = sum(1 for e in events if e[1] == "frame")
        for t, kind, payload in events:
            q_command, q_true, stand = state(t)
            if kind == "joints":
                values = np.append(q_command + noise_rng.normal(0.0, plan.encoder_noise, dof), 0.02)
                message = JointState(messages.header(t, ""), joint_names, values, np.zeros(len(values)), np.zeros(0))
                write("/joint_states", message, JointState.__msgtype__, t)
                continue
            camera = rig.cameras[payload]
            encoding = encodings[camera.name]
            if stand is not None:
                key = (payload, stand)
                if key not in clean_cache:
                    clean_cache = {k: v for k, v in clean_cache.items() if k[1] == stand}
                    clean_cache[key] = render(camera, q_true)
                clean = clean_cache[key]
            else:
                clean = render(camera, q_true)
            rng = np.random.default_rng([seed, int(round((t - START) * 1e6)), payload, 0xBA6])
            depth = camera.depth_model.measure(clean.depth, clean.rgb, camera.K, camera.near, camera.far, rng)
            frame = f"{camera.name}_link" if encoding.body_frame else f"{camera.name}_color_optical_frame"
            topics = camera_topics(camera.name, encoding)
            if encoding.depth is not None:
                message, msgtype = encode_depth(messages, t, frame, depth, encoding.depth)
                write(topics["depth"], message, msgtype, t)
                info = messages.camera_info(t, frame, camera.width, camera.height, camera.K)
                write(topics["depth_info"], info, info.__msgtype__, t)
            if encoding.colour is not None:
                stamp = t + encoding.colour_delay_s
                message, msgtype = encode_colour(messages, stamp, frame, clean.rgb, encoding.colour)
                write(topics["colour"], message, msgtype, stamp)
                info = messages.camera_info(stamp, frame, camera.width, camera.height, camera.K)
                write(topics["colour_info"], info, info.__msgtype__, stamp)
            frames_done += 1
            if progress is not None:
                progress(frames_done, frames_total)
    return {"stands": stands, "q_reached": q_reached, "frames": frames_total,
            "topics": {camera.name: camera_topics(camera.name, encodings[camera.name]) for camera in rig.cameras}}
