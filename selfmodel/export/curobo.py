"""cuRobo's files for the exported body: the sphere file and a robot configuration that loads as is.

``curobo_spheres.yml`` holds ``collision_spheres: {link: [{center: [x, y, z], radius: r}]}`` (link
frames, metres, the export margin in the radii). ``curobo_robot.yml`` is a robot configuration in
cuRobo's layout (``robot_cfg: kinematics: ...``) naming only links of the exported URDF and files of
the export folder; the spheres are written into it too, so it needs nothing else. cuRobo resolves
relative paths against its own content folder, so the paths are absolute: those of the folder
where the export was written (move the folder and rewrite ``urdf_path`` and ``asset_root_path``).
Both are written with a YAML library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml


def spheres_document(spheres: dict[str, "SphereCover"]) -> dict:
    """cuRobo's ``collision_spheres``: the links that have spheres (a link with no geometry of its
    own is left out, as it is of ``collision_link_names``)."""
    spheres = {link: cover for link, cover in spheres.items() if len(cover.radii)}
    return {"collision_spheres": {
        link: [{"center": [round(float(v), 6) for v in centre], "radius": round(float(radius), 6)}
               for centre, radius in zip(cover.centres, cover.radii)]
        for link, cover in spheres.items()}}


def robot_document(folder: Path, urdf_name: str, base_link: str, tip_link: str, spheres: dict,
                   disabled: list[tuple[str, str, str]], joint_names: list[str], held: dict[str, float],
                   retract: np.ndarray) -> dict:
    """cuRobo's ``robot_cfg``. ``disabled``: the SRDF's disabled pairs (they become
    ``self_collision_ignore``); ``held``: joints off the chain, locked where they are held;
    ``retract``: (dof,) a configuration the arm really stood at."""
    folder = Path(folder).resolve()
    spheres = {link: cover for link, cover in spheres.items() if len(cover.radii)}
    links = sorted(spheres)
    ignore: dict[str, list[str]] = {}
    for a, b, _ in disabled:
        if a in spheres and b in spheres:
            ignore.setdefault(a, []).append(b)
    names = list(joint_names) + list(held)
    return {"robot_cfg": {"kinematics": {
        "urdf_path": str(folder / urdf_name),
        "asset_root_path": str(folder),
        "base_link": base_link,
        "ee_link": tip_link,
        "collision_link_names": links,
        "collision_spheres": spheres_document(spheres)["collision_spheres"],
        # The margin is already in the radii.
        "collision_sphere_buffer": 0.0,
        "self_collision_ignore": {link: sorted(others) for link, others in sorted(ignore.items())},
        "self_collision_buffer": {link: 0.0 for link in links},
        "use_global_cumul": True,
        "mesh_link_names": list(links),  # its own list: YAML would write the same one as an alias
        "lock_joints": {name: float(value) for name, value in held.items()},
        "cspace": {
            "joint_names": names,
            "retract_config": [float(v) for v in retract] + [float(v) for v in held.values()],
            "null_space_weight": [1.0] * len(names),
            "cspace_distance_weight": [1.0] * len(names),
            "max_acceleration": 15.0,
            "max_jerk": 500.0,
        },
    }}}


def dump(document: dict) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=120)
