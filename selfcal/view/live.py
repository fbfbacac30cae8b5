"""A :class:`rigs.scene.Scene` shown live in the browser with viser: nodes, sliders, notes.

Every moving body becomes a viser frame node (``/<body>``) whose pose the joint sliders update;
the body's geometry hangs beneath it, so a slider moves only a few transforms (the meshes are sent
once). What the scene recomputes per configuration (``Scene.live``) is replaced on every move.
The server binds ``host`` (127.0.0.1 unless the user says otherwise) and changes no file.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rigs.scene import Item, Lines, Mesh, Points, Scene, quaternion_wxyz


def free_port(host: str) -> int:
    """A TCP port nothing listens on at ``host`` now (the system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def node_name(item: Item) -> str:
    """The viser node of an item: under its body's node when it moves with one."""
    if not item.parent:
        return "/" + item.name
    leaf = "geometry" if item.name == item.parent else item.name.replace("/", "_")
    return f"/{item.parent}/{leaf}"


def _rgb(colour) -> tuple[int, int, int]:
    return tuple(int(round(255 * float(c))) for c in colour)


def _add(server, item: Item, name: str | None = None):
    """Send one item to viser; returns its handle."""
    name = name or node_name(item)
    if isinstance(item, Mesh):
        return server.scene.add_mesh_simple(name, np.asarray(item.vertices, np.float32), np.asarray(item.faces, np.uint32),
                                            color=_rgb(item.colour), opacity=None if item.opacity >= 1 else item.opacity,
                                            side="double" if item.opacity < 1 else "front", cast_shadow=False,
                                            receive_shadow=False)
    if isinstance(item, Lines):
        return server.scene.add_line_segments(name, np.asarray(item.segments, np.float32), _rgb(item.colour),
                                              thickness=2.0, thickness_units="screen")
    if isinstance(item, Points):
        colours = item.colours
        colours = (np.clip(np.asarray(colours) * 255, 0, 255).astype(np.uint8) if np.ndim(colours) == 2
                   else _rgb(colours))
        return server.scene.add_point_cloud(name, np.asarray(item.points, np.float32), colours, point_size=item.size,
                                            point_shape="circle")
    transform = np.asarray(item.transform)
    return server.scene.add_frame(name, axes_length=item.length, axes_radius=item.length * 0.04,
                                  wxyz=quaternion_wxyz(transform[:3, :3]), position=transform[:3, 3])


@dataclass
class LiveView:
    """A running viewer: ``url``; ``update(q)`` poses the scene (what a slider does); ``stop()``."""

    server: object
    scene: Scene
    url: str
    sliders: list = field(default_factory=list)
    bodies: dict = field(default_factory=dict)
    live_handles: dict = field(default_factory=dict)  # name -> (handle, segment count)
    lock: threading.Lock = field(default_factory=threading.Lock)
    handles: dict = field(default_factory=dict)  # item name -> viser handle
    notes: object = None  # the markdown handle of the title and notes
    finished: threading.Event = field(default_factory=threading.Event)  # set once Scene.later has been applied

    def update(self, q: np.ndarray) -> None:
        """Pose every body and redraw the live items at q (dof,)."""
        with self.lock:
            poses = self.scene.poses_at(q)
            live = self.scene.live_at(q)
            with self.server.atomic():
                for body, handle in self.bodies.items():
                    pose = poses[body]
                    handle.wxyz = quaternion_wxyz(pose[:3, :3])
                    handle.position = pose[:3, 3]
                self.live_handles = self._replace_live(live)

    def _replace_live(self, live: list[Item]) -> dict:
        """Send the live items of a new configuration: lines with as many segments as before are
        moved in place (a client redraws them without rebuilding), others added or removed."""
        kept = {}
        for item in live:
            old = self.live_handles.pop(item.name, None)
            if old is not None and isinstance(item, Lines) and old[1] == len(item.segments):
                old[0].points = np.asarray(item.segments, np.float32)
                kept[item.name] = old
                continue
            if old is not None:
                old[0].remove()
            kept[item.name] = (_add(self.server, item, "/live/" + item.name), len(getattr(item, "segments", ())))
        for handle, _ in self.live_handles.values():
            handle.remove()
        return kept

    def q(self) -> np.ndarray:
        return np.array([slider.value for slider in self.sliders], dtype=float)

    def node_names(self) -> list[str]:
        """Every node this view sent (bodies, geometry, frames), as viser names them."""
        return [node_name(item) for item in self.scene.items] + ["/" + body for body in self.bodies]

    def has_node(self, name: str) -> bool:
        """Whether viser's scene holds a node of this name (its own server-side record)."""
        return self.server.scene.get_handle_by_name(name) is not None

    def stop(self) -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # viser announces it; the command has said what it does
            self.server.stop()


def start(scene: Scene, host: str = "127.0.0.1", port: int | None = None) -> LiveView:
    """Serve ``scene`` on http://host:port (a free port when None); returns once it listens."""
    import viser  # viser takes about a second to import; only this command needs it

    port = free_port(host) if port is None else port
    with contextlib.redirect_stdout(io.StringIO()):  # viser prints a banner whatever verbose says; we print the address
        server = viser.ViserServer(host=host, port=port, verbose=False)
    server.gui.configure_theme(control_width="large", show_logo=False)
    # Shadow maps draw the scene twice more per frame: on software WebGL (no GPU) that halves the frame rate.
    server.scene.configure_default_lights(enabled=True, cast_shadow=False)
    # No image-based lighting: preparing viser's environment map costs a software-WebGL browser ~10 s
    # before its first frame, and the default lights show the shapes as well.
    server.scene.configure_environment_map(hdri=None)
    server.scene.add_light_hemisphere("/lights/sky", sky_color=(255, 255, 255), ground_color=(90, 90, 100),
                                      intensity=1.6, position=(0.0, 0.0, 1.0))
    server.scene.add_light_ambient("/lights/ambient", intensity=0.5)
    lo, hi = scene.bounds(meshes_only=True)
    centre, size = (lo + hi) / 2, float(np.linalg.norm(hi - lo))
    server.initial_camera.position = tuple(centre + np.array([0.55, -0.75, 0.45]) * max(size, 0.2))
    server.initial_camera.look_at = tuple(centre)
    server.initial_camera.up = (0.0, 0.0, 1.0)
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{server.get_port()}"
    view = LiveView(server, scene, url)
    poses = scene.poses_at(scene.q_start)
    for body in scene.bodies():
        pose = poses[body]
        view.bodies[body] = server.scene.add_frame("/" + body, show_axes=False, wxyz=quaternion_wxyz(pose[:3, :3]),
                                                   position=pose[:3, 3])
    for item in scene.items:
        view.handles[item.name] = _add(server, item)
    view.live_handles = view._replace_live(scene.live_at(scene.q_start))
    view.notes = server.gui.add_markdown(_markdown(scene.title, scene.notes))
    if scene.joints:
        with server.gui.add_folder("Joints (rad)"):
            for joint in scene.joints:
                slider = server.gui.add_slider(joint.name, min=joint.lower, max=joint.upper,
                                               step=max((joint.upper - joint.lower) / 500, 1e-4), initial_value=joint.value)
                slider.on_update(lambda _event: view.update(view.q()))
                view.sliders.append(slider)
    if scene.later is None:
        view.finished.set()
    else:
        threading.Thread(target=_apply_later, args=(view,), daemon=True).start()
    return view


def _markdown(title: str, notes: list[str]) -> str:
    return f"**{title}**\n\n" + "\n\n".join(notes)


def _apply_later(view: LiveView) -> None:
    """Run the scene's slow part (a self-model's damage check) after the first frame and recolour."""
    scene = view.scene
    view.notes.content = _markdown(scene.title, scene.notes + ["(checking the learned body against the description...)"])
    try:
        colours, notes = scene.later()
    except Exception as error:  # said where the user looks, then raised (the thread prints it); the view still works
        view.notes.content = _markdown(scene.title, scene.notes + [f"The check could not run: {error}"])
        view.finished.set()
        raise
    for name, colour in colours.items():
        if name in view.handles:
            view.handles[name].color = _rgb(colour)
    scene.notes = scene.notes + notes
    view.notes.content = _markdown(scene.title, scene.notes)
    view.finished.set()


def wait_until_interrupted(view: LiveView, announce: Callable[[], None] | None = None) -> None:
    """``announce()`` (say the address), then serve until Ctrl-C, then stop the server (the port is
    free again when this returns). The announcement is inside: a Ctrl-C sent as soon as a script has
    read the address, before the wait began, left viser's threads serving and the process running."""
    try:
        if announce is not None:
            announce()
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        view.stop()
