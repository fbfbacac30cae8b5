"""Camera intrinsics as ROS ``camera_info`` YAML (the format ROS tools and camera drivers write)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from rigs.documents import as_table
from rigs.errors import InputError
from rigs.files import atomic_write_text, read_yaml


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
        top = as_table(read_yaml(path, "camera_info file"), path, "ROS camera_info YAML")
        top.used |= set(top.data)  # ROS writes more keys (rectification, projection) than selfcal reads
        K = top.get("camera_matrix", "table").get("data", "vector", length=9).reshape(3, 3)
        coefficients = top.get("distortion_coefficients", "table", None)
        distortion = np.zeros(5) if coefficients is None else coefficients.get("data", "vector", np.zeros(5))
        size = {}
        for key in ("image_width", "image_height"):
            size[key] = top.get(key, "int")
            if size[key] <= 0:
                raise InputError(f"{top.where(key)} should be a positive number of pixels, got {size[key]}.")
        name = top.data.get("camera_name")  # ROS writes any scalar here; the folder name when absent
        return cls(path.parent.name if name is None else str(name), size["image_width"], size["image_height"], K, distortion)
