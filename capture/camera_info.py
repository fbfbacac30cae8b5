"""Camera intrinsics as ROS ``camera_info`` YAML (the format ROS tools and camera drivers write)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from rigs.errors import InputError
from rigs.files import atomic_write_text


@dataclass
class CameraInfo:
    """Pinhole intrinsics: K (3, 3) in pixels, plumb_bob distortion (5,), image size."""

    name: str
    width: int
    height: int
    K: np.ndarray
    distortion: np.ndarray

    def to_yaml(self) -> str:
        K = self.K
        projection = np.hstack([K, np.zeros((3, 1))])
        data = {
            "image_width": int(self.width),
            "image_height": int(self.height),
            "camera_name": self.name,
            "camera_matrix": {"rows": 3, "cols": 3, "data": [float(v) for v in K.ravel()]},
            "distortion_model": "plumb_bob",
            "distortion_coefficients": {"rows": 1, "cols": 5, "data": [float(v) for v in self.distortion]},
            "rectification_matrix": {"rows": 3, "cols": 3, "data": [float(v) for v in np.eye(3).ravel()]},
            "projection_matrix": {"rows": 3, "cols": 4, "data": [float(v) for v in projection.ravel()]},
        }
        return yaml.safe_dump(data, sort_keys=False)

    def save(self, path: Path) -> None:
        atomic_write_text(Path(path), self.to_yaml())

    @classmethod
    def load(cls, path: Path) -> "CameraInfo":
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: camera_info file not found.")
        try:
            data = yaml.safe_load(path.read_text())
            K = np.asarray(data["camera_matrix"]["data"], dtype=float).reshape(3, 3)
            distortion = np.asarray(data.get("distortion_coefficients", {}).get("data", [0.0] * 5), dtype=float)
            return cls(str(data.get("camera_name", path.parent.name)), int(data["image_width"]),
                       int(data["image_height"]), K, distortion)
        except (yaml.YAMLError, KeyError, TypeError, ValueError) as error:
            raise InputError(f"{path}: not a ROS camera_info YAML ({type(error).__name__}: {error}).") from None
