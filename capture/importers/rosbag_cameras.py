"""Cameras in a ROS 2 bag: which image topics belong to which camera, and every frame's stamp.

One camera per topic namespace, named after it: ``/front/color/image_raw`` and
``/front/aligned_depth_to_color/image_raw`` are camera ``front``. Its ``sensor_msgs/CameraInfo``
sits beside each image topic (``/front/color/camera_info``; for a transport such as
``.../image_raw/compressed`` beside ``.../image_raw``). A camera has at most one depth and one
colour stream, and both must carry the same ``header.frame_id`` (depth registered to colour, as
``aligned_depth_to_color`` is): a depth pixel and a colour pixel are then the same ray.

When a namespace has several candidates, the raw stream wins over a compressed copy of itself and
the depth stream in the colour stream's frame wins over others; what is still ambiguous is an
error that lists the bag's image topics, and ``--camera NAME=TOPIC[,TOPIC]`` says which to take.

The bag is read twice: :func:`scan_cameras` reads every image message's header (stamp, frame)
and decodes the first of each stream to check it; the frames to keep are decoded afterwards by
:func:`decode_frames`, one pass over the bag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from capture.camera_info import CameraInfo
from capture.importers.ros_images import (CAMERA_INFO, COMPRESSED, IMAGE, MILLIMETRE, ImageKind, camera_info_from_message,
                                          decode_colour, decode_depth, image_kind, message_time)
from rigs.errors import InputError, setting

TRANSPORTS = ("compressed", "compressedDepth", "theora", "zstd")
DEPTH_RANGE_M = (0.25, 10.0)  # a depth camera's median reading of a scene with an arm lies in here
NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass
class Stream:
    """One image topic of a camera: what it carries and the stamp of every message (s)."""

    topic: str
    msgtype: str
    kind: ImageKind
    frame_id: str
    info_topic: str
    info: CameraInfo
    width: int
    height: int
    stamps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    median_depth: float | None = None  # m, of the first frame (depth streams)


@dataclass
class BagCamera:
    name: str
    depth: Stream | None
    colour: Stream | None

    @property
    def streams(self) -> list[Stream]:
        return [s for s in (self.depth, self.colour) if s is not None]

    @property
    def frame_id(self) -> str:
        return self.streams[0].frame_id

    @property
    def info(self) -> CameraInfo:
        return (self.depth or self.colour).info


def stream_namespace(topic: str) -> str:
    """``/front/color/image_raw/compressed`` -> ``/front/color``: the topic less transport and image name."""
    parts = [p for p in topic.split("/") if p]
    if parts and parts[-1] in TRANSPORTS:
        parts = parts[:-1]
    return "/" + "/".join(parts[:-1]) if len(parts) > 1 else "/"


def image_base_topic(topic: str) -> str:
    """The topic without a transport suffix (``.../image_raw/compressed`` -> ``.../image_raw``)."""
    parts = [p for p in topic.split("/") if p]
    if parts and parts[-1] in TRANSPORTS:
        parts = parts[:-1]
    return "/" + "/".join(parts)


def camera_name(topic: str) -> str:
    """The camera a topic belongs to: its first namespace (``/front/color/image_raw`` -> ``front``)."""
    parts = [p for p in topic.split("/") if p]
    return NAME.sub("_", parts[0]) if len(parts) > 1 else "camera"


def parse_camera_choice(text: str) -> tuple[str, list[str]]:
    """``NAME=TOPIC[,TOPIC]`` -> (name, topics)."""
    name, sep, topics = text.partition("=")
    name = name.strip()
    if not sep or not name or NAME.search(name) or not topics.strip():
        raise InputError(f"{setting('cameras')} {text!r}: expected NAME=DEPTH_TOPIC[,COLOUR_TOPIC] with a name of "
                         f"letters, digits, '_' or '-'.")
    return name, [t.strip() for t in topics.split(",") if t.strip()]


def _first_message(reader, connection):
    for _, bag_time, raw in reader.messages(connections=[connection]):
        return reader.deserialize(raw, connection.msgtype), bag_time
    return None, None


def _topics_listing(connections) -> str:
    images = sorted(c.topic for c in connections if c.msgtype in (IMAGE, COMPRESSED))
    return ", ".join(images) if images else "no image topics"


def _candidate(reader, bag: Path, connection) -> tuple[ImageKind, str, object] | None:
    message, _ = _first_message(reader, connection)
    if message is None:
        return None
    where = f"{bag}: topic {connection.topic} message 1"
    return image_kind(connection.msgtype, message, where), str(message.header.frame_id).lstrip("/"), message


def _choose(name: str, candidates: list[tuple[str, ImageKind, str]], bag: Path, listing: str) -> tuple[str | None, str | None]:
    """The depth and colour topic of one automatically grouped camera, or InputError when ambiguous."""
    def prefer_raw(items):
        by_base: dict[str, list] = {}
        for item in items:
            by_base.setdefault(image_base_topic(item[0]), []).append(item)
        return [min(group, key=lambda item: item[1].compressed is not None) for group in by_base.values()]

    depth = prefer_raw([c for c in candidates if c[1].kind == "depth"])
    colour = prefer_raw([c for c in candidates if c[1].kind == "colour"])
    if len(depth) > 1 and colour:
        registered = [d for d in depth if any(d[2] == c[2] for c in colour)]
        depth = registered or depth
    if len(colour) > 1 and len(depth) == 1:
        registered = [c for c in colour if c[2] == depth[0][2]]
        colour = registered or colour
    hint = (f"choose with {setting('cameras')} {name}=DEPTH_TOPIC[,COLOUR_TOPIC] (the bag's image topics: {listing}).")
    if len(depth) > 1:
        raise InputError(f"{bag}: camera {name!r} has {len(depth)} depth streams ({', '.join(d[0] for d in depth)}); "
                         + hint)
    if len(colour) > 1:
        raise InputError(f"{bag}: camera {name!r} has {len(colour)} colour streams ({', '.join(c[0] for c in colour)}); "
                         + hint)
    return (depth[0][0] if depth else None), (colour[0][0] if colour else None)


def _check_depth_scale(depth: np.ndarray, stream: Stream, units_m: float, bag: Path) -> None:
    """A depth image in the wrong unit reads 1000 times too near or too far: refuse it here."""
    valid = depth[depth > 0]
    where = f"{bag}: topic {stream.topic} message 1"
    if valid.size < 0.01 * depth.size:
        return  # an image of almost nothing says nothing about its unit
    median = float(np.median(valid))
    stream.median_depth = median
    low, high = DEPTH_RANGE_M
    if low <= median <= high:
        return
    if stream.kind.encoding == "32FC1":
        hint = ("the values look like millimetres; 32FC1 depth must be in metres (REP 118)" if median > high
                else "32FC1 depth must be in metres (REP 118)")
    else:
        unit = "millimetres" if units_m == MILLIMETRE else f"{units_m:g} m per unit"
        guess = 10.0 ** round(np.log10(1.5 * units_m / median))
        hint = (f"its {stream.kind.encoding} values read as {unit}; pass {setting('depth_scale')} {guess:g} if they "
                f"are in another unit")
    raise InputError(f"{where}: the median depth is {median:.4g} m, outside the {low:g}-{high:g} m a depth camera "
                     f"measures; {hint}.")


def scan_cameras(reader, bag: Path, chosen: list[str] | None, units_m: float) -> list[BagCamera]:
    """Group the bag's image topics into cameras, read their camera_info, check the first frames, and
    read every frame's stamp (module docstring). ``chosen``: ``--camera`` values; ``units_m``: metres
    per unit of 16UC1 depth."""
    connections = list(reader.connections)
    by_topic: dict[str, list] = {}
    for connection in connections:
        by_topic.setdefault(connection.topic, []).append(connection)
    listing = _topics_listing(connections)
    images = {t: cs for t, cs in by_topic.items() if any(c.msgtype in (IMAGE, COMPRESSED) for c in cs)}

    groups: dict[str, list[str]] = {}
    if chosen:
        for text in chosen:
            name, topics = parse_camera_choice(text)
            if name in groups:
                raise InputError(f"{setting('cameras')} {name!r} is given twice.")
            for topic in topics:
                if topic not in by_topic:
                    raise InputError(f"{bag}: {setting('cameras')} {name}: no topic {topic!r} (the bag's image topics: "
                                     f"{listing}).")
                if topic not in images:
                    raise InputError(f"{bag}: {setting('cameras')} {name}: topic {topic} carries "
                                     f"{by_topic[topic][0].msgtype}, not an image (the bag's image topics: {listing}).")
            groups[name] = topics
    else:
        for topic in sorted(images):
            groups.setdefault(camera_name(topic), []).append(topic)

    cameras = []
    for name, topics in groups.items():
        candidates = []
        firsts = {}
        for topic in topics:
            found = _candidate(reader, bag, images[topic][0])
            if found is None:
                if chosen:
                    raise InputError(f"{bag}: topic {topic} has no messages.")
                continue
            kind, frame_id, message = found
            candidates.append((topic, kind, frame_id))
            firsts[topic] = message
        if not candidates:
            continue
        if chosen:
            kinds = [c[1].kind for c in candidates]
            if len(candidates) > 2 or len(set(kinds)) != len(kinds):
                raise InputError(f"{setting('cameras')} {name}: give at most one depth and one colour topic (got "
                                 + ", ".join(f"{c[0]} ({c[1].kind})" for c in candidates) + ").")
            depth_topic = next((c[0] for c in candidates if c[1].kind == "depth"), None)
            colour_topic = next((c[0] for c in candidates if c[1].kind == "colour"), None)
        else:
            depth_topic, colour_topic = _choose(name, candidates, bag, listing)
        streams = {}
        for topic in (t for t in (depth_topic, colour_topic) if t is not None):
            kind, frame_id = next((c[1], c[2]) for c in candidates if c[0] == topic)
            streams[topic] = _stream(reader, bag, images[topic][0], kind, frame_id, firsts[topic], by_topic, listing,
                                     name, units_m)
        camera = BagCamera(name, streams.get(depth_topic), streams.get(colour_topic))
        if camera.depth is not None and camera.colour is not None:
            _check_registered(camera, bag)
        cameras.append(camera)
    if not cameras:
        return []
    _read_stamps(reader, bag, cameras)
    return cameras


def _stream(reader, bag: Path, connection, kind: ImageKind, frame_id: str, message, by_topic: dict, listing: str,
            camera: str, units_m: float) -> Stream:
    topic = connection.topic
    info_topic = stream_namespace(topic).rstrip("/") + "/camera_info"
    if info_topic not in by_topic or by_topic[info_topic][0].msgtype != CAMERA_INFO:
        raise InputError(f"{bag}: image topic {topic} has no {CAMERA_INFO} beside it (expected on {info_topic}; the "
                         f"bag's image topics: {listing}).")
    info_message, _ = _first_message(reader, by_topic[info_topic][0])
    if info_message is None:
        raise InputError(f"{bag}: topic {info_topic} has no messages.")
    rectified = "rect" in image_base_topic(topic).rsplit("/", 1)[-1]
    info = camera_info_from_message(info_message, camera, rectified, f"{bag}: topic {info_topic} message 1")
    where = f"{bag}: topic {topic} message 1"
    if not frame_id:
        raise InputError(f"{where}: header.frame_id is empty; the camera's frame cannot be known.")
    if kind.kind == "depth":
        image = decode_depth(connection.msgtype, message, kind, units_m, where)
    else:
        image = decode_colour(connection.msgtype, message, kind, where)
    height, width = image.shape[:2]
    if (width, height) != (info.width, info.height):
        raise InputError(f"{where}: the image is {width}x{height} but {info_topic} says {info.width}x{info.height}.")
    stream = Stream(topic, connection.msgtype, kind, frame_id, info_topic, info, width, height)
    if kind.kind == "depth":
        _check_depth_scale(image, stream, units_m, bag)
    return stream


def _check_registered(camera: BagCamera, bag: Path) -> None:
    depth, colour = camera.depth, camera.colour
    if depth.frame_id != colour.frame_id:
        raise InputError(f"{bag}: camera {camera.name!r}: depth {depth.topic} is in frame {depth.frame_id!r}, colour "
                         f"{colour.topic} in {colour.frame_id!r}; depth must be registered to the colour image "
                         f"(record aligned depth, e.g. aligned_depth_to_color), or import them as two cameras with "
                         f"{setting('cameras')} NAME=TOPIC for each.")
    if (depth.width, depth.height) != (colour.width, colour.height) or \
            not np.allclose(depth.info.K, colour.info.K, rtol=1e-3, atol=0.5):
        raise InputError(f"{bag}: camera {camera.name!r}: {depth.info_topic} and {colour.info_topic} give different "
                         f"intrinsics or sizes; a registered depth image has the colour image's camera_info.")


def _read_stamps(reader, bag: Path, cameras: list[BagCamera]) -> None:
    streams = {s.topic: s for camera in cameras for s in camera.streams}
    connections = [c for c in reader.connections if c.topic in streams]
    stamps: dict[str, list[float]] = {topic: [] for topic in streams}
    for connection, bag_time, raw in reader.messages(connections=connections):
        stream = streams[connection.topic]
        number = len(stamps[connection.topic]) + 1
        try:
            message = reader.deserialize(raw, connection.msgtype)
        except Exception as error:  # a corrupt message: any decoder error means bad input
            raise InputError(f"{bag}: topic {connection.topic} message {number} cannot be decoded "
                             f"({type(error).__name__}).") from None
        frame_id = str(message.header.frame_id).lstrip("/")
        if frame_id != stream.frame_id:
            raise InputError(f"{bag}: topic {connection.topic} message {number} is in frame {frame_id!r}, earlier ones "
                             f"in {stream.frame_id!r}; a camera must keep its frame.")
        stamps[connection.topic].append(message_time(message, bag_time))
    for topic, stream in streams.items():
        stream.stamps = np.array(stamps[topic])


def decode_frames(reader, bag: Path, cameras: list[BagCamera], wanted: dict[tuple[str, str], set[int]],
                  units_m: float) -> Iterator[tuple[str, str, int, np.ndarray]]:
    """Decode the wanted messages: ``wanted[(camera, "depth"|"colour")]`` = message numbers (0-based, in
    bag order); yields (camera, "depth"|"colour", number, image) in bag order."""
    owner = {}
    for camera in cameras:
        for role, stream in (("depth", camera.depth), ("colour", camera.colour)):
            if stream is not None:
                owner[stream.topic] = (camera, role, stream)
    connections = [c for c in reader.connections if c.topic in owner]
    counters = {topic: -1 for topic in owner}
    for connection, _, raw in reader.messages(connections=connections):
        camera, role, stream = owner[connection.topic]
        counters[connection.topic] += 1
        number = counters[connection.topic]
        if number not in wanted.get((camera.name, role), ()):
            continue
        where = f"{bag}: topic {connection.topic} message {number + 1}"
        message = reader.deserialize(raw, connection.msgtype)
        if role == "depth":
            image = decode_depth(connection.msgtype, message, stream.kind, units_m, where)
        else:
            image = decode_colour(connection.msgtype, message, stream.kind, where)
        if image.shape[:2] != (stream.height, stream.width):
            raise InputError(f"{where}: the image is {image.shape[1]}x{image.shape[0]}, the camera's first was "
                             f"{stream.width}x{stream.height}.")
        yield camera.name, role, number, image


def pair_by_stamp(depth_times: np.ndarray, colour_times: np.ndarray, tolerance: float) -> list[tuple[int, int]]:
    """One-to-one pairs (depth index, colour index) whose stamps differ by at most ``tolerance`` s,
    closest first."""
    if not len(depth_times) or not len(colour_times):
        return []
    order = np.argsort(colour_times)
    sorted_colour = colour_times[order]
    candidates = []
    for i, t in enumerate(depth_times):
        k = np.searchsorted(sorted_colour, t)
        for j in (k - 1, k, k + 1):
            if 0 <= j < len(sorted_colour) and abs(sorted_colour[j] - t) <= tolerance:
                candidates.append((abs(sorted_colour[j] - t), i, int(order[j])))
    pairs, used_depth, used_colour = [], set(), set()
    for _, i, j in sorted(candidates):
        if i not in used_depth and j not in used_colour:
            pairs.append((i, j))
            used_depth.add(i)
            used_colour.add(j)
    return sorted(pairs)
