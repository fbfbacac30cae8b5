"""ROS 2 camera messages as arrays: ``sensor_msgs/Image``, ``CompressedImage`` and ``CameraInfo``.

Encodings read (what camera drivers publish):

- depth ``Image``: ``16UC1`` (and ``mono16``) in millimetres (``--depth-scale`` changes the unit),
  ``32FC1`` in metres; 0, NaN and +-Inf are no reading (REP 118);
- colour ``Image``: ``rgb8``, ``bgr8``, ``mono8`` (also ``rgba8``, ``bgra8``);
- ``CompressedImage`` colour: ``jpeg`` or ``png`` (format ``"jpeg"``, ``"png"`` or
  ``"rgb8; jpeg compressed bgr8"``);
- ``CompressedImage`` depth from ``compressed_depth_image_transport`` (format
  ``"16UC1; compressedDepth png"`` or ``"32FC1; compressedDepth png"``): a 12-byte header (int32
  format, float32 ``A``, float32 ``B``) and a 16-bit PNG; ``16UC1`` holds the depth units
  themselves, ``32FC1`` a quantised inverse depth ``q`` with ``z = A / (q - B)`` m (0: no reading).

Depth comes out as float32 metres with 0 for no reading, colour as (H, W, 3) uint8 RGB.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from capture.camera_info import CameraInfo
from rigs.errors import InputError

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
DEPTH_ENCODINGS = ("16UC1", "mono16", "32FC1")
COLOUR_ENCODINGS = ("rgb8", "bgr8", "mono8", "rgba8", "bgra8")
COMPRESSED_DEPTH_HEADER = 12
MILLIMETRE = 0.001


@dataclass(frozen=True)
class ImageKind:
    """What an image topic carries: ``kind`` depth or colour, the encoding and how it is packed."""

    kind: str  # "depth" or "colour"
    encoding: str  # 16UC1, 32FC1, rgb8, ... (for compressed messages: of the image before compression)
    compressed: str | None = None  # None, "png", "jpeg"


def message_time(message, bag_time_ns: int) -> float:
    """Seconds: the header stamp, or the bag's receive time when the stamp is zero."""
    stamp = message.header.stamp.sec + message.header.stamp.nanosec * 1e-9
    return stamp if stamp > 0 else bag_time_ns * 1e-9


def image_kind(msgtype: str, message, where: str) -> ImageKind:
    """The kind of an image message; InputError for encodings selfcal does not read."""
    if msgtype == IMAGE:
        encoding = str(message.encoding)
        if encoding in DEPTH_ENCODINGS:
            return ImageKind("depth", encoding)
        if encoding in COLOUR_ENCODINGS:
            return ImageKind("colour", encoding)
        raise InputError(f"{where}: image encoding {encoding!r} is not one selfcal reads (depth: "
                         f"{', '.join(DEPTH_ENCODINGS)}; colour: {', '.join(COLOUR_ENCODINGS)}).")
    if msgtype == COMPRESSED:
        text = str(message.format).strip()
        lower = text.lower()
        if "compresseddepth" in lower:
            encoding = text.split(";")[0].strip()
            if encoding not in ("16UC1", "32FC1"):
                raise InputError(f"{where}: compressedDepth of {encoding!r} is not readable (16UC1 or 32FC1 only).")
            if "rvl" in lower:
                raise InputError(f"{where}: compressedDepth 'rvl' is not readable; record it with the png "
                                 f"format (format {text!r}).")
            return ImageKind("depth", encoding, "png")
        if "jpeg" in lower or "jpg" in lower:
            return ImageKind("colour", "bgr8", "jpeg")
        if "png" in lower:
            return ImageKind("colour", "bgr8", "png")
        raise InputError(f"{where}: compressed image format {text!r} is neither jpeg, png nor compressedDepth png.")
    raise InputError(f"{where}: {msgtype} is not an image message ({IMAGE} or {COMPRESSED}).")


def _raw_pixels(message, channels: int, dtype: str, where: str) -> np.ndarray:
    """An Image's data as (H, W[, C]) of ``dtype``, honouring the row step and byte order."""
    height, width, step = int(message.height), int(message.width), int(message.step)
    item = np.dtype(dtype).itemsize * channels
    data = np.asarray(message.data, dtype=np.uint8)
    if height <= 0 or width <= 0:
        raise InputError(f"{where}: image is {width}x{height}.")
    if step < width * item or len(data) < step * height:
        raise InputError(f"{where}: {len(data)} bytes of data do not hold a {width}x{height} {message.encoding} "
                         f"image with a row step of {step}.")
    rows = data[: step * height].reshape(height, step)[:, : width * item]
    order = ">" if message.is_bigendian else "<"
    pixels = np.frombuffer(rows.tobytes(), dtype=np.dtype(dtype).newbyteorder(order) if item > channels else dtype)
    shape = (height, width, channels) if channels > 1 else (height, width)
    return pixels.reshape(shape).astype(np.dtype(dtype).newbyteorder("="))


def _decode_png(data: bytes, where: str) -> np.ndarray:
    import cv2

    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise InputError(f"{where}: the compressed image cannot be decoded.")
    return image


def decode_depth(msgtype: str, message, kind: ImageKind, units_m: float, where: str) -> np.ndarray:
    """Depth (H, W) float32 m, 0 for no reading. ``units_m``: metres per unit of 16UC1 data."""
    if kind.compressed is None:
        if kind.encoding == "32FC1":
            depth = _raw_pixels(message, 1, "float32", where).astype(np.float64)
        else:
            depth = _raw_pixels(message, 1, "uint16", where).astype(np.float64) * units_m
    else:
        data = bytes(np.asarray(message.data, dtype=np.uint8))
        if len(data) <= COMPRESSED_DEPTH_HEADER:
            raise InputError(f"{where}: compressedDepth data of {len(data)} bytes has no image after its header.")
        _, quant_a, quant_b = struct.unpack("<iff", data[:COMPRESSED_DEPTH_HEADER])
        values = _decode_png(data[COMPRESSED_DEPTH_HEADER:], where)
        if values.dtype != np.uint16 or values.ndim != 2:
            raise InputError(f"{where}: compressedDepth holds a {values.dtype} image with {values.ndim} axes, "
                             f"expected a 16-bit single-channel PNG.")
        if kind.encoding == "32FC1":
            q = values.astype(np.float64)
            with np.errstate(divide="ignore"):
                depth = np.where(values > 0, quant_a / (q - quant_b), 0.0)
        else:
            depth = values.astype(np.float64) * units_m
    finite = np.isfinite(depth)
    negative = finite & (depth < 0)
    if negative.any():
        v, u = np.argwhere(negative)[0]
        raise InputError(f"{where}: pixel ({u}, {v}) has depth {depth[v, u]:.4g} m; depth must not be negative "
                         f"(0, NaN or Inf mean no reading).")
    return np.where(finite, depth, 0.0).astype(np.float32)


def decode_colour(msgtype: str, message, kind: ImageKind, where: str) -> np.ndarray:
    """Colour (H, W, 3) uint8 RGB (a mono image repeated in three channels)."""
    import cv2

    if kind.compressed is None:
        channels = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}[kind.encoding]
        pixels = _raw_pixels(message, channels, "uint8", where)
        if kind.encoding == "mono8":
            return np.repeat(pixels[..., None], 3, axis=2)
        if kind.encoding.startswith("bgr"):
            return np.ascontiguousarray(pixels[..., 2::-1])
        return np.ascontiguousarray(pixels[..., :3])
    image = _decode_png(bytes(np.asarray(message.data, dtype=np.uint8)), where)
    if image.ndim == 2:
        return np.repeat(image[..., None], 3, axis=2).astype(np.uint8)
    if image.dtype != np.uint8:
        image = (image / 257).astype(np.uint8)
    code = cv2.COLOR_BGRA2RGB if image.shape[2] == 4 else cv2.COLOR_BGR2RGB
    return cv2.cvtColor(image, code)


SUPPORTED_DISTORTION = ("plumb_bob", "rational_polynomial", "")


def camera_info_from_message(message, name: str, rectified: bool, where: str) -> CameraInfo:
    """A CameraInfo message -> :class:`CameraInfo`. ``rectified``: the image is already undistorted
    (an ``image_rect*`` topic): its intrinsics are P's left 3x3 and it has no distortion."""
    width, height = int(message.width), int(message.height)
    K = np.asarray(message.k, dtype=float).reshape(3, 3)
    P = np.asarray(message.p, dtype=float).reshape(3, 4)
    model = str(message.distortion_model)
    distortion = np.asarray(message.d, dtype=float)
    if rectified:
        K, distortion = P[:, :3].copy(), np.zeros(5)
    if width <= 0 or height <= 0:
        raise InputError(f"{where}: camera_info gives an image size of {width}x{height}.")
    if not (K[0, 0] > 0 and K[1, 1] > 0) or not np.all(np.isfinite(K)):
        raise InputError(f"{where}: camera_info has no focal length (K = {K.ravel().tolist()}): the camera is not "
                         f"calibrated; calibrate its intrinsics (selfcal calibrate-camera) and record again.")
    if not rectified and np.any(distortion) and model not in SUPPORTED_DISTORTION:
        raise InputError(f"{where}: distortion model {model!r} is not readable (plumb_bob or rational_polynomial).")
    if not np.all(np.isfinite(distortion)):
        raise InputError(f"{where}: camera_info distortion has non-finite values.")
    return CameraInfo(name, width, height, K, distortion)
