"""The pybullet world that plays a simulated rig's hidden truth.

It loads the true arm (errors, bends and added bodies written into its URDF), moves it to the
joint angles the robot would really reach (commanded angles, minus the elastic sag of each joint
under gravity and payload, plus repeatability noise), and measures it: reflector positions in the
tracker frame with noise drawn from the tracker's MPE, and camera images (RGB, metric depth,
segmentation) rendered from the true geometry.

A rig with a ``[board]`` carries a printed ChArUco board on its tip link: a textured quad on a thin
grey backing, visual only (it neither collides nor blocks the tracker's rays), placed at the true
``tip_T_board`` (nominal plus a small mounting error drawn from the truth seed) whenever the arm
moves. Board frame: origin at the centre of the chessboard area, x along the ``squares[0]`` side,
y along the ``squares[1]`` side, z out of the printed face. OpenCV's board frame (origin at the
first square's outer corner, y down the printed image, z into the board) is
``board_T_opencv = [[1, 0, 0, -W/2], [0, -1, 0, H/2], [0, 0, -1, 0]]`` with W, H the chessboard's
side lengths.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import trimesh

from rigs.kinematics import ArmModel
from rigs.quiet import c_output_silenced, import_pybullet
from rigs.spec import BoardSpec, CameraSpec, Rig
from rigs.transforms import exp6, invert, quat_xyzw
from rigs.truth import TrueArm

p = import_pybullet()


BOARD_MOUNT_TRANSLATION = 0.5e-3  # m, standard deviation per axis of the board's true mounting error
BOARD_MOUNT_ROTATION = np.radians(0.2)  # rad
BOARD_TEXTURE_PX_PER_SQUARE = 96
BOARD_MARGIN_SQUARES = 0.5  # white quiet zone around the chessboard, in squares


def true_tip_T_board(rig: Rig) -> np.ndarray:
    """The board's true pose (4, 4) on the tip link: nominal times a mounting error fixed by the truth seed."""
    if rig.truth is None:
        return rig.board.tip_T_board.copy()
    rng = np.random.default_rng([rig.truth.seed, 0xB0A2D])
    error = np.concatenate([rng.normal(0, BOARD_MOUNT_TRANSLATION, 3), rng.normal(0, BOARD_MOUNT_ROTATION, 3)])
    return rig.board.tip_T_board @ exp6(error)


def board_plate(squares: tuple[int, int], square: float) -> trimesh.Trimesh:
    """The board as a solid plate in the board frame: the printed face (chessboard and white margin)
    at z = 0, the grey backing behind it down to z = -3.5 mm."""
    margin = round(BOARD_MARGIN_SQUARES * BOARD_TEXTURE_PX_PER_SQUARE) / BOARD_TEXTURE_PX_PER_SQUARE * square
    size = [squares[0] * square + 2 * margin, squares[1] * square + 2 * margin, 0.0035]
    return trimesh.creation.box(size, transform=trimesh.transformations.translation_matrix([0, 0, -0.00175]))


def board_texture(board: BoardSpec) -> tuple[np.ndarray, float]:
    """The printed board: (H, W) uint8 image with a white margin, and its margin width in metres."""
    import cv2

    dictionary = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, board.dictionary))
    charuco = cv2.aruco.CharucoBoard(board.squares, board.square, board.marker, dictionary)
    scale = BOARD_TEXTURE_PX_PER_SQUARE
    margin = int(round(BOARD_MARGIN_SQUARES * scale))
    size = (board.squares[0] * scale + 2 * margin, board.squares[1] * scale + 2 * margin)
    return charuco.generateImage(size, marginSize=margin, borderBits=1), margin / scale * board.square


@dataclass
class Rendering:
    rgb: np.ndarray  # (H, W, 3) uint8
    depth: np.ndarray  # (H, W) float32 metres along the optical axis, 0 where nothing was hit
    segmentation: np.ndarray  # (H, W) int16: 0 nothing, 1 + index into Simulator.link_names


class Simulator:
    """One pybullet client (DIRECT) holding the true arm of ``rig``, loaded from ``true_urdf``."""

    def __init__(self, rig: Rig, arm: TrueArm, true_urdf: Path):
        self.rig, self.arm = rig, arm
        with c_output_silenced():
            self.client = p.connect(p.DIRECT)
            self.body = p.loadURDF(str(true_urdf), useFixedBase=True, physicsClientId=self.client,
                                   flags=p.URDF_USE_INERTIA_FROM_FILE)
        count = p.getNumJoints(self.body, physicsClientId=self.client)
        infos = [p.getJointInfo(self.body, i, physicsClientId=self.client) for i in range(count)]
        self.joint_index = {info[1].decode(): info[0] for info in infos}
        self.link_index = {info[12].decode(): info[0] for info in infos}
        base_name = p.getBodyInfo(self.body, physicsClientId=self.client)[0].decode()
        self.link_index[base_name] = -1
        self.link_names = [base_name] + [info[12].decode() for info in infos]
        self.chain = ArmModel.from_urdf(true_urdf, rig.robot.base_link, rig.robot.tip_link)
        self.pb_joints = [self.joint_index[name] for name in self.chain.joint_names]
        self.tip_index = self.link_index[rig.robot.tip_link]
        self.base_index = self.link_index[rig.robot.base_link]
        for name, value in rig.robot.held_joints.items():  # fingers and the like stay where the rig holds them
            p.resetJointState(self.body, self.joint_index[name], float(value), physicsClientId=self.client)
        self.true_urdf = Path(true_urdf)
        self._self_contact = None
        self.board_bodies: list[int] = []
        self.tip_T_board = None
        if rig.board is not None:
            self.tip_T_board = true_tip_T_board(rig)
            self._add_board(rig.board)
        self.scene_bodies = add_scene_bodies(self.client, rig, self.world_T_link(self.base_index))

    def _add_board(self, board: BoardSpec) -> None:
        self.board_bodies = add_board_bodies(self.client, board)
        self._place_board()

    def _place_board(self) -> None:
        if not self.board_bodies:
            return
        world_T_board = self.world_T_link(self.tip_index) @ self.tip_T_board
        position, orientation = world_T_board[:3, 3].tolist(), quat_xyzw(world_T_board[:3, :3]).tolist()
        for body in self.board_bodies:
            p.resetBasePositionAndOrientation(body, position, orientation, physicsClientId=self.client)

    def close(self) -> None:
        if self.client is not None and p.isConnected(self.client):
            p.disconnect(self.client)
        self.client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- moving -------------------------------------------------------------------------------
    def reached_q(self, q_command: np.ndarray, payload_kg: float = 0.0) -> np.ndarray:
        """Joint angles (dof,) the arm really reaches: each joint sags by tau_i / k_i under gravity."""
        if self.arm.stiffness is None:
            return np.asarray(q_command, dtype=float).copy()
        tau = self.chain.gravity_torques(q_command, payload_kg, self.rig.robot.payload_com)
        return q_command - tau / self.arm.stiffness

    def joint_torques(self, q_reached: np.ndarray, payload_kg: float, rng: np.random.Generator,
                      velocity: np.ndarray | None = None, acceleration: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
        """(noise-free, measured) joint torque readings (dof,) N m at the pose the arm reached.

        ``tau`` is the true arm's inverse dynamics (its own inertials, the payload a point mass at
        the rig's ``payload_com``) at ``velocity`` (dof,) rad/s and ``acceleration`` (dof,) rad/s^2
        (at rest when None), plus friction; the drive reports ``sign * tau + offset`` and the
        reading adds gaussian noise (:class:`rigs.spec.TorqueSensingSpec`).
        """
        sensing = self.rig.truth.torques
        dof = self.chain.dof
        v = np.zeros(dof) if velocity is None else np.asarray(velocity, float)
        a = np.zeros(dof) if acceleration is None else np.asarray(acceleration, float)
        tau = self.chain.inverse_dynamics(q_reached, v, a, payload_kg, self.rig.robot.payload_com)
        if sensing.viscous is not None:
            tau = tau + sensing.viscous * v
        if sensing.coulomb is not None:
            tau = tau + sensing.coulomb * np.sign(v)
        clean = sensing.sign * tau + (self.arm.torque_offsets if self.arm.torque_offsets is not None else 0.0)
        return clean, clean + rng.normal(0.0, sensing.noise, dof)

    def set_q(self, q: np.ndarray) -> None:
        for index, value in zip(self.pb_joints, q):
            p.resetJointState(self.body, index, float(value), physicsClientId=self.client)
        self._place_board()

    def world_T_link(self, link: str | int) -> np.ndarray:
        index = self.link_index[link] if isinstance(link, str) else link
        if index == -1:
            # pybullet reports the base's inertial frame; step back to the URDF link frame.
            position, orientation = p.getBasePositionAndOrientation(self.body, physicsClientId=self.client)
            local = p.getDynamicsInfo(self.body, -1, physicsClientId=self.client)
            inverse = p.invertTransform(local[3], local[4])
            position, orientation = p.multiplyTransforms(position, orientation, *inverse)
        else:
            state = p.getLinkState(self.body, index, computeForwardKinematics=True, physicsClientId=self.client)
            position, orientation = state[4], state[5]  # the URDF link frame, not the inertial one
        pose = np.eye(4)
        pose[:3, :3] = np.asarray(p.getMatrixFromQuaternion(orientation)).reshape(3, 3)
        pose[:3, 3] = position
        return pose

    def base_T_link(self, link: str | int) -> np.ndarray:
        return invert(self.world_T_link(self.base_index)) @ self.world_T_link(link)

    # -- checks -------------------------------------------------------------------------------
    def self_contact(self):
        """The true arm's self-contact rules (:mod:`rigs.self_contact`), the board part of the tip."""
        if self._self_contact is None:
            from rigs.self_contact import SelfContact

            extra = {}
            if self.rig.board is not None:
                extra[self.rig.robot.tip_link] = board_plate(self.rig.board.squares, self.rig.board.square).apply_transform(
                    self.tip_T_board)
            self._self_contact = SelfContact(self.true_urdf, self.chain.joint_names, self.rig.robot.held_joints, extra)
        return self._self_contact

    def in_collision(self, q: np.ndarray, margin: float = 0.005) -> bool:
        """True when the true arm's meshes pass through each other (beyond the nesting of parts joined
        by one joint), two links joined by more than one joint come within ``margin`` m, or a link
        dips below the floor."""
        contact = self.self_contact()
        contact.clearance = margin
        self.set_q(q)
        if contact.contacts({link: self.base_T_link(link) for link in contact.links}):
            return True
        floor = self.rig.robot.floor_z
        if floor is not None:
            base_z = self.world_T_link(self.base_index)[2, 3]
            for index in range(2, p.getNumJoints(self.body, physicsClientId=self.client)):
                low = p.getAABB(self.body, index, physicsClientId=self.client)[0][2]
                if low - base_z < floor:
                    return True
        return False

    def line_of_sight(self, origin_world: np.ndarray, point_world: np.ndarray, stop_short: float = 0.01) -> bool:
        """Whether a ray from ``origin_world`` reaches ``point_world`` (less ``stop_short`` m) unblocked."""
        direction = point_world - origin_world
        end = point_world - direction / np.linalg.norm(direction) * stop_short
        hit = p.rayTest(origin_world.tolist(), end.tolist(), physicsClientId=self.client)[0]
        return hit[0] == -1

    # -- measuring ----------------------------------------------------------------------------
    def target_positions(self, q_reached: np.ndarray) -> dict[str, np.ndarray]:
        """True reflector positions (3,) in the base frame with the arm at ``q_reached``."""
        self.set_q(q_reached)
        base_T_tip = self.base_T_link(self.tip_index)
        return {name: base_T_tip[:3, :3] @ xyz + base_T_tip[:3, 3] for name, xyz in self.arm.target_offsets.items()}

    def tracker_noise(self, point_tracker: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noise (3,) m for a point in the tracker frame: radial and transverse sigmas from the MPE."""
        tracker = self.rig.tracker
        distance = float(np.linalg.norm(point_tracker))
        radial, transverse = tracker.sigmas(distance, self.rig.truth.tracker_noise_scale)
        direction = point_tracker / distance
        helper = np.array([0.0, 0.0, 1.0]) if abs(direction[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
        e1 = np.cross(direction, helper)
        e1 /= np.linalg.norm(e1)
        e2 = np.cross(direction, e1)
        return direction * rng.normal(0, radial) + e1 * rng.normal(0, transverse) + e2 * rng.normal(0, transverse)

    def render(self, camera: CameraSpec, q_reached: np.ndarray, rng: np.random.Generator) -> Rendering:
        """RGB, metric depth (as ``camera.depth_model`` measures it) and link segmentation (scene: 0)."""
        clean = self.render_true(camera, q_reached)
        depth = camera.depth_model.measure(clean.depth, clean.rgb, camera.K, camera.near, camera.far, rng)
        return Rendering(clean.rgb, depth, clean.segmentation)

    def render_true(self, camera: CameraSpec, q_reached: np.ndarray) -> Rendering:
        """As :meth:`render`, with the true depth (m along the optical axis, 0 where nothing was hit)."""
        self.set_q(q_reached)
        world_T_base = self.world_T_link(self.base_index)
        view, projection = _gl_matrices(camera, world_T_base @ camera.base_T_camera)
        W, H, near, far = camera.width, camera.height, camera.near, camera.far
        _, _, rgba, buffer, seg = p.getCameraImage(
            W, H, view, projection, renderer=p.ER_TINY_RENDERER,
            flags=p.ER_SEGMENTATION_MASK_OBJECT_AND_LINKINDEX, physicsClientId=self.client)
        rgba = np.asarray(rgba, dtype=np.uint8).reshape(H, W, 4)
        buffer = np.asarray(buffer, dtype=np.float64).reshape(H, W)
        seg = np.asarray(seg, dtype=np.int64).reshape(H, W)
        hit = buffer < 1.0 - 1e-7
        depth = np.where(hit, far * near / (far - (far - near) * buffer), 0.0)
        rgb = rgba[..., :3].copy()
        body = np.where(seg >= 0, seg & ((1 << 24) - 1), -1)
        link = np.where(body == self.body, (seg >> 24) - 1, -2)  # -1 is the base, -2 nothing or the scene
        on_board = np.isin(body, self.board_bodies) & (seg >= 0)
        link = np.where(on_board, self.tip_index, link)  # the board is bolted to the tip link
        segmentation = np.where(link > -2, link + 2, 0).astype(np.int16)
        return Rendering(rgb, depth, segmentation)


def nominal_world(rig: Rig) -> Simulator:
    """A pybullet world of the robot as described (no hidden errors): for planning and checks."""
    from rigs.truth import nominal_arm
    from rigs.urdf import check_meshes

    check_meshes(rig.robot.urdf, rig.robot.package_dirs)  # pybullet would read a mesh from anywhere
    return Simulator(rig, nominal_arm(rig), rig.robot.urdf)


def add_board_bodies(client: int, board: BoardSpec) -> list[int]:
    """The printed board as a textured quad on a grey backing (visual only); returns the two body ids.

    pybullet needs the texture and the quad as files: they live in a temporary folder for the call.
    """
    import cv2

    image, margin = board_texture(board)
    half_x = board.squares[0] * board.square / 2 + margin
    half_y = board.squares[1] * board.square / 2 + margin
    folder = Path(tempfile.mkdtemp(prefix="selfcal-board-"))
    try:
        cv2.imwrite(str(folder / "board.png"), cv2.cvtColor(image, cv2.COLOR_GRAY2BGR))
        # Texture v runs up the image; the printed image's top row lies at board +y.
        (folder / "board.obj").write_text(
            f"v {-half_x!r} {-half_y!r} 0\nv {half_x!r} {-half_y!r} 0\nv {half_x!r} {half_y!r} 0\nv {-half_x!r} {half_y!r} 0\n"
            "vt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\nvn 0 0 1\nf 1/1/1 2/2/1 3/3/1\nf 1/1/1 3/3/1 4/4/1\n")
        with c_output_silenced():
            face = p.createVisualShape(p.GEOM_MESH, fileName=str(folder / "board.obj"), meshScale=[1, 1, 1],
                                       physicsClientId=client)
            backing = p.createVisualShape(p.GEOM_BOX, halfExtents=[half_x, half_y, 0.0015],
                                          visualFramePosition=[0, 0, -0.002], rgbaColor=[0.35, 0.35, 0.35, 1],
                                          physicsClientId=client)
            texture = p.loadTexture(str(folder / "board.png"), physicsClientId=client)
        bodies = [p.createMultiBody(0, -1, shape, physicsClientId=client) for shape in (face, backing)]
        p.changeVisualShape(bodies[0], -1, textureUniqueId=texture, rgbaColor=[1, 1, 1, 1], physicsClientId=client)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return bodies


def add_scene_bodies(client: int, rig: Rig, world_T_base: np.ndarray) -> list[int]:
    """The rig's scene boxes (table, walls) as visual-only bodies; returns their body ids."""
    if rig.scene is None:
        return []
    bodies = []
    with c_output_silenced():
        for box in rig.scene.boxes:
            shape = p.createVisualShape(p.GEOM_BOX, halfExtents=(np.asarray(box.size) / 2).tolist(),
                                        rgbaColor=list(box.rgba), physicsClientId=client)
            world_T_box = world_T_base @ box.base_T_box
            bodies.append(p.createMultiBody(0, -1, shape, basePosition=world_T_box[:3, 3].tolist(),
                                            baseOrientation=quat_xyzw(world_T_box[:3, :3]).tolist(),
                                            physicsClientId=client))
    return bodies


def _gl_matrices(camera: CameraSpec, world_T_camera: np.ndarray) -> tuple[list[float], list[float]]:
    """pybullet's (column-major) view and projection matrices for an OpenCV-convention camera."""
    view = invert(world_T_camera @ np.diag([1.0, -1.0, -1.0, 1.0]))
    W, H, K, near, far = camera.width, camera.height, camera.K, camera.near, camera.far
    projection = np.array([
        [2 * K[0, 0] / W, 0, 1 - 2 * K[0, 2] / W, 0],
        # TinyRenderer puts rows one pixel higher than this matrix says (measured against ChArUco
        # corners): shift by one row so that pixels match K in the OpenCV convention.
        [0, 2 * K[1, 1] / H, 2 * (K[1, 2] + 1) / H - 1, 0],
        [0, 0, -(far + near) / (far - near), -2 * far * near / (far - near)],
        [0, 0, -1, 0]])
    return view.T.flatten().tolist(), projection.T.flatten().tolist()


def render_board_views(board: BoardSpec, camera: CameraSpec, camera_T_boards: list[np.ndarray],
                       supersample: int = 3) -> list[np.ndarray]:
    """RGB images (H, W, 3) uint8 of the board alone at each pose ``camera_T_board`` (4, 4): the
    close-up views one takes to calibrate a camera's intrinsics (``camera.K`` is the truth).

    Each image is rendered ``supersample`` times larger and box-filtered down, as a real sensor
    integrates light over each pixel; TinyRenderer alone samples one point per pixel, and its
    jagged edges would limit corner accuracy more than any real camera's.
    """
    import dataclasses

    import cv2

    s = int(supersample)
    K = camera.K.copy()
    K[:2, :2] *= s
    K[:2, 2] = s * K[:2, 2] + (s - 1) / 2  # pixel i of the small image is the mean of pixels s*i .. s*i + s-1
    large = dataclasses.replace(camera, width=camera.width * s, height=camera.height * s, K=K)
    with c_output_silenced():
        client = p.connect(p.DIRECT)
    try:
        bodies = add_board_bodies(client, board)
        images = []
        for camera_T_board in camera_T_boards:
            for body in bodies:
                p.resetBasePositionAndOrientation(body, camera_T_board[:3, 3].tolist(),
                                                  quat_xyzw(camera_T_board[:3, :3]).tolist(), physicsClientId=client)
            view, projection = _gl_matrices(large, np.eye(4))
            _, _, rgba, _, _ = p.getCameraImage(large.width, large.height, view, projection,
                                                renderer=p.ER_TINY_RENDERER, physicsClientId=client)
            rgb = np.asarray(rgba, dtype=np.uint8).reshape(large.height, large.width, 4)[..., :3]
            images.append(cv2.resize(rgb, (camera.width, camera.height), interpolation=cv2.INTER_AREA))
        return images
    finally:
        p.disconnect(client)
