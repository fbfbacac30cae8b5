"""A :class:`rigs.scene.Scene` embedded in a report page as an offline 3D view.

The scene is drawn at its opening configuration, in the world frame: a JSON header names each item
(mesh, lines or points) with its colour and its slice of two arrays, positions (uint16 steps of
``step`` m from ``origin`` across the scene's box) and triangle indices (uint32), each
gzip-compressed and base64-encoded into the page; a small WebGL
client (``scene_client.js``, inlined) draws it. Nothing is fetched, so the page opens from a
copied folder with no network. Where scripting is off, or WebGL is missing, the page shows
``fallback`` (today's picture, or a sentence) in its place.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from pathlib import Path

import numpy as np

from rigs.scene import Frame, Lines, Mesh, Points, Scene

CLIENT = Path(__file__).with_name("scene_client.js")
AXES = ((1.0, 0.1, 0.1), (0.1, 0.7, 0.1), (0.1, 0.2, 1.0))
# The canvas shows once the client has a WebGL context; the fallback once it knows it has none.
STYLE = (".selfcal-scene{position:relative;margin:0.8em 0}"
         ".selfcal-scene canvas{width:100%;height:520px;cursor:grab;border:1px solid #ddd}"
         ".selfcal-scene canvas,.selfcal-scene .scene-hint,.selfcal-scene .scene-fallback{display:none}"
         ".selfcal-scene.webgl canvas{display:block}.selfcal-scene.webgl .scene-hint{display:inline}"
         ".selfcal-scene.no-webgl .scene-fallback{display:block}"
         ".selfcal-scene .scene-hint{position:absolute;left:0.6em;top:0.4em;color:#777;font-size:0.85em}")


def _packed(array: np.ndarray, dtype) -> str:
    return base64.b64encode(gzip.compress(np.ascontiguousarray(array, dtype=dtype).tobytes(), 6, mtime=0)).decode("ascii")


def serialise(scene: Scene, q: np.ndarray | None = None) -> tuple[dict, np.ndarray, np.ndarray]:
    """(header, positions (n,) float32, indices (m,) uint32) of the scene at q (default: its opening
    configuration). Frames become three coloured line segments."""
    floats, ints, items = [], [], []
    used_floats = used_ints = 0
    for item in scene.posed(q):
        if isinstance(item, Frame):
            origin, axes = item.transform[:3, 3], item.transform[:3, :3].T * item.length
            parts = [(f"{item.name}/{'xyz'[k]}", np.array([[origin, origin + axes[k]]]), AXES[k]) for k in range(3)]
            for name, segments, colour in parts:
                data = segments.reshape(-1).astype(np.float32)
                items.append({"type": "lines", "name": name, "colour": list(colour), "opacity": 1.0,
                              "v": [used_floats, len(data)]})
                floats.append(data)
                used_floats += len(data)
            continue
        if isinstance(item, Mesh):
            data = np.asarray(item.vertices, np.float32).reshape(-1)
            faces = np.asarray(item.faces, np.uint32).reshape(-1)
            entry = {"type": "mesh", "f": [used_ints, len(faces)]}
            ints.append(faces)
            used_ints += len(faces)
        elif isinstance(item, Lines):
            data = np.asarray(item.segments, np.float32).reshape(-1)
            entry = {"type": "lines"}
        elif isinstance(item, Points):
            data = np.asarray(item.points, np.float32).reshape(-1)
            entry = {"type": "points"}
        else:
            raise TypeError(f"not a scene item: {type(item).__name__}")
        colour = item.colour if not isinstance(item, Points) else (
            item.colours if np.ndim(item.colours) == 1 else np.asarray(item.colours).mean(axis=0))
        entry.update({"name": item.name, "colour": [float(c) for c in colour],
                      "opacity": float(getattr(item, "opacity", 1.0)), "v": [used_floats, len(data)]})
        items.append(entry)
        floats.append(data)
        used_floats += len(data)
    lo, hi = scene.bounds(q, meshes_only=any(isinstance(i, Mesh) for i in scene.items))
    header = {"title": scene.title, "kind": scene.kind, "items": items, "bounds": [lo.tolist(), hi.tolist()],
              "joints": {joint.name: joint.value for joint in scene.joints}}
    positions = np.concatenate(floats) if floats else np.zeros(0, np.float32)
    indices = np.concatenate(ints) if ints else np.zeros(0, np.uint32)
    return header, positions, indices


def embed(scene: Scene, fallback: str = "") -> str:
    """The HTML of the scene's offline 3D view, with ``fallback`` (inner HTML) shown where scripting
    or WebGL is missing; the notes follow the view."""
    header, positions, indices = serialise(scene)
    # Positions as 16-bit steps across the scene's box: 0.05 mm steps over 3 m, half the bytes of float32.
    xyz = positions.reshape(-1, 3).astype(np.float64)
    origin = xyz.min(axis=0) if len(xyz) else np.zeros(3)
    step = max(float(np.ptp(xyz, axis=0).max()) / 65535.0, 1e-9) if len(xyz) else 1.0
    steps = np.round((xyz - origin) / step).astype(np.uint16).reshape(-1)
    header["origin"], header["step"] = origin.tolist(), step
    fallback = fallback or ("<p class='muted'>The 3D view needs JavaScript and WebGL; open this page in a browser "
                            "that has them, or run <code>selfcal view</code> on this folder.</p>")
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in scene.notes)
    header_json = json.dumps(header, separators=(",", ":")).replace("</", "<\\/")
    return (f"<style>{STYLE}</style>"
            f"<div class='selfcal-scene' data-kind='{html.escape(scene.kind)}'>"
            f"<canvas aria-label='{html.escape(scene.title)}'></canvas>"
            "<span class='scene-hint'>drag: turn, shift-drag: pan, wheel: zoom</span>"
            f"<div class='scene-fallback'>{fallback}</div>"
            f"<script type='application/json' class='scene-header'>{header_json}</script>"
            f"<script type='text/plain' class='scene-floats'>{_packed(steps, np.uint16)}</script>"
            f"<script type='text/plain' class='scene-ints'>{_packed(indices, np.uint32)}</script>"
            f"</div><noscript>{fallback}</noscript>"
            f"<ul class='muted'>{notes}</ul>"
            f"<script>{CLIENT.read_text()}</script>")
