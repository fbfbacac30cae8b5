"""The ChArUco board: its spec, its corners in the board frame, and finding them in an image.

Board frame (the same as the simulator's, ``rigs/simulator.py``): origin at the centre of the
chessboard area, x along the ``squares[0]`` side, y along the ``squares[1]`` side, z out of the
printed face. OpenCV numbers the inner corners row by row from the printed image's top-left and
puts its own frame at that outer corner with y down the image and z into the board;
``board_T_opencv`` converts.

Detections use OpenCV 5's object API (``CharucoDetector.detectBoard``); OpenCV 5 returns corners
as (N, 2) and ids as (N,) (4.x added a middle axis), so every output is reshaped here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rigs.errors import InputError, setting

MIN_CORNERS = 6  # fewer corners than this do not constrain a pose (PnP) or a view (intrinsics)


@dataclass(frozen=True)
class CharucoBoardSpec:
    """A printed ChArUco board: ``squares`` (columns, rows), square and marker sides in metres.

    ``legacy``: the pattern OpenCV drew before 4.6, which differs from today's on boards with an
    even number of rows (the top-left square white, not black): such a board read as today's
    shows no corners at all."""

    squares: tuple[int, int]
    square: float
    marker: float
    dictionary: str = "DICT_4X4_50"
    legacy: bool = False

    @property
    def corner_count(self) -> int:
        return (self.squares[0] - 1) * (self.squares[1] - 1)

    @property
    def board_T_opencv(self) -> np.ndarray:
        """(4, 4) OpenCV's board frame in the board frame (see the module docstring)."""
        width, height = self.squares[0] * self.square, self.squares[1] * self.square
        return np.array([[1.0, 0, 0, -width / 2], [0, -1.0, 0, height / 2], [0, 0, -1.0, 0], [0, 0, 0, 1.0]])

    def opencv_board(self):
        import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

        dictionary = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, self.dictionary))
        board = cv2.aruco.CharucoBoard(self.squares, self.square, self.marker, dictionary)
        if self.legacy:
            board.setLegacyPattern(True)
        return board

    def corners_opencv(self, ids: np.ndarray) -> np.ndarray:
        """Inner corners ``ids`` (N,) -> (N, 3) m in OpenCV's board frame (what cv2.solvePnP wants)."""
        return np.asarray(self.opencv_board().getChessboardCorners(), dtype=float).reshape(-1, 3)[np.asarray(ids)]

    def corners(self, ids: np.ndarray) -> np.ndarray:
        """Inner corners ``ids`` (N,) -> (N, 3) m in the board frame."""
        points = self.corners_opencv(ids)
        transform = self.board_T_opencv
        return points @ transform[:3, :3].T + transform[:3, 3]

    def describe(self) -> str:
        return (f"charuco:{self.squares[0]}:{self.squares[1]}:{self.square:g}:{self.marker:g}:"
                f"{self.dictionary.removeprefix('DICT_')}" + (":legacy" if self.legacy else ""))

    def manifest(self) -> dict:
        """The board as a session manifest's ``sensors.board`` and a calibration document hold it."""
        return {"kind": "charuco", "squares": list(self.squares), "square_m": self.square, "marker_m": self.marker,
                "dictionary": self.dictionary, **({"legacy": True} if self.legacy else {})}


# What a board that shows no corners may be, said beside the refusal.
LEGACY_HINT = ("a board OpenCV drew before 4.6 with an even number of rows has the older pattern: "
               "add :legacy to its description")


def _dictionary_name(text: str, where: str) -> str:
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    name = text.strip().upper()
    name = name if name.startswith("DICT_") else f"DICT_{name}"
    if not isinstance(getattr(cv2.aruco, name, None), int):
        known = sorted(n.removeprefix("DICT_") for n in dir(cv2.aruco) if n.startswith("DICT_") and n[5].isdigit())
        raise InputError(f"{where}: ArUco dictionary {text!r} is unknown (known: {', '.join(known)}).")
    return name


def parse_board(text: str) -> CharucoBoardSpec:
    """``charuco:SQX:SQY:SQUARE_M:MARKER_M:DICT[:legacy]`` (e.g. ``charuco:7:5:0.035:0.026:4X4_50``;
    ``:legacy`` for a board drawn by OpenCV before 4.6)."""
    where = f"{setting('board')} {text!r}"
    parts = text.split(":")
    legacy = len(parts) == 7 and parts[6].strip().lower() == "legacy"
    if len(parts) not in (6, 7) or parts[0].lower() != "charuco" or (len(parts) == 7 and not legacy):
        raise InputError(f"{where}: expected charuco:SQUARES_X:SQUARES_Y:SQUARE_M:MARKER_M:DICTIONARY[:legacy], "
                         f"e.g. charuco:7:5:0.035:0.026:4X4_50.")
    try:
        squares = (int(parts[1]), int(parts[2]))
        square, marker = float(parts[3]), float(parts[4])
    except ValueError:
        raise InputError(f"{where}: squares must be integers and sizes numbers in metres.") from None
    return make_board(squares, square, marker, _dictionary_name(parts[5], where), where, legacy)


def make_board(squares: tuple[int, int], square: float, marker: float, dictionary: str, where: str,
               legacy: bool = False) -> CharucoBoardSpec:
    if min(squares) < 2 or max(squares) > 100:
        raise InputError(f"{where}: a ChArUco board needs 2 to 100 squares a side, got {squares[0]} x {squares[1]}.")
    if not (0 < marker < square < 10):
        raise InputError(f"{where}: need 0 < marker ({marker} m) < square ({square} m); sizes are in metres.")
    board = CharucoBoardSpec(squares, float(square), float(marker), _dictionary_name(dictionary, where), bool(legacy))
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    markers = squares[0] * squares[1] // 2
    size = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, board.dictionary)).bytesList.shape[0]
    if markers > size:
        raise InputError(f"{where}: a {squares[0]} x {squares[1]} board has {markers} markers, "
                         f"dictionary {board.dictionary} only {size}.")
    return board


def board_from_manifest(manifest: dict, where: str) -> CharucoBoardSpec | None:
    """The board a session's ``sensors.board`` describes, or None when it has none."""
    entry = (manifest.get("sensors") or {}).get("board")
    if not entry:
        return None
    if entry.get("kind", "charuco") != "charuco":
        raise InputError(f"{where}: sensors.board.kind {entry.get('kind')!r} is not supported (only 'charuco').")
    try:
        return make_board((int(entry["squares"][0]), int(entry["squares"][1])), float(entry["square_m"]),
                          float(entry["marker_m"]), str(entry.get("dictionary", "DICT_4X4_50")), where,
                          entry.get("legacy", False) is True)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise InputError(f"{where}: sensors.board is incomplete ({type(error).__name__}: {error}).") from None


@dataclass
class BoardDetection:
    """Board corners found in one image: ``ids`` (N,) int, ``pixels`` (N, 2) float (u right, v down),
    and ``markers`` (how many ArUco markers of the board's dictionary were seen at all)."""

    ids: np.ndarray
    pixels: np.ndarray
    markers: int

    @property
    def count(self) -> int:
        return len(self.ids)


class BoardDetector:
    """Finds a board's inner corners (sub-pixel) in images; one OpenCV detector reused across images."""

    def __init__(self, board: CharucoBoardSpec):
        import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

        self.board = board
        parameters = cv2.aruco.DetectorParameters()
        # Corner refinement is done on the chessboard corners by the ChArUco step; markers stay coarse.
        charuco_parameters = cv2.aruco.CharucoParameters()
        charuco_parameters.minMarkers = 1
        self._detector = cv2.aruco.CharucoDetector(board.opencv_board(), charuco_parameters, parameters)

    def detect(self, image: np.ndarray) -> BoardDetection:
        """``image`` (H, W) or (H, W, 3) uint8 -> detection (possibly empty)."""
        import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

        gray = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        corners, ids, marker_corners, marker_ids = self._detector.detectBoard(gray)
        markers = 0 if marker_ids is None else len(np.asarray(marker_ids).ravel())
        if ids is None or len(np.asarray(ids).ravel()) == 0:
            return BoardDetection(np.zeros(0, dtype=int), np.zeros((0, 2)), markers)
        ids = np.asarray(ids, dtype=int).ravel()
        pixels = np.asarray(corners, dtype=float).reshape(-1, 2)
        order = np.argsort(ids)
        return BoardDetection(ids[order], pixels[order], markers)


def read_image(path: Path) -> np.ndarray:
    """An image file (PNG, JPEG, ...) as (H, W) uint8 grey; InputError when unreadable."""
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: image file not found.")
    image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if image is None:
        raise InputError(f"{path}: not an image OpenCV can read.")
    return image
