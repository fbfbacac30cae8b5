"""A learned residual: a small torch ensemble for what geometry (and compliance) leave unexplained.

Input features per pose (:func:`features`): the joint readings ``q`` (dof,) rad, the gravity torques
``tau`` (dof,) N m (URDF inertias plus the payload) and the tip displacement per unit compliance of
each joint ``J_j(q) tau_j``, each standardised with the training set's mean and spread.
Output: a 3D correction (m, base frame) of the tip, added to every reflector of the pose.

Guards, because a few hundred poses are little data for a network:

- the output is clipped to ``bound_m``, the largest training residual norm (the network may never
  claim a correction larger than anything it saw);
- it is scaled by the out-of-bag gain ``gain = clip(<y, y_oob> / <y_oob, y_oob>, 0, 1)``: each member
  trains on a bootstrap resample, so every pose has predictions from members that never saw it;
  where those explain nothing (residuals that are only noise) the gain is 0 and the model is silent;
- it is shrunk toward zero by ``agreement = mean^2 / (mean^2 + ensemble variance)`` per axis (members
  that disagree are fitting noise or guessing) and by ``proximity = exp(-excess^2 / 2)`` with
  ``excess = max(0, d / d_ref - 1)``, d the distance from the query to the nearest training pose
  in standardised feature space and d_ref the 95th percentile of the training poses' own
  nearest-neighbour distances (a configuration or payload far from the data gets no correction).

Training: every member of every ensemble asked for at once (several folds of a cross-validation,
say) trains in one batched run: the members' weights are stacked and multiplied with ``bmm``, the
loss is the sum of the members' own losses, so each member's gradient and Adam step are exactly
what training it alone would give, for a fraction of the interpreter's overhead.

Files: ``residual.pt`` (tensors only: member state_dicts, normalisation, training features; loaded
with ``torch.load(..., weights_only=True)``) and ``residual.json`` (the configuration and bounds).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import scipy.spatial

from calib.deflection.torques import gravity_torques
from calib.model.chain import BatchKinematics
from rigs.documents import check_format
from rigs.errors import InputError, first_line, setting
from rigs.files import atomic_write_text, load_torch, read_json

WEIGHTS_FILE = "residual.pt"
CONFIG_FILE = "residual.json"
FORMAT = "selfcal-residual-ensemble"
FORMAT_VERSION = 1


@dataclass
class ResidualConfig:
    """Network and training settings (what residual.json holds besides the learned bounds)."""

    members: int = 5
    hidden: int = 32
    layers: int = 2
    # 150 full-batch Adam steps at 1.5e-2 end within 2 % of 600 at 3e-3 on the benchmarks' held-out
    # errors, at a quarter of the cost: --deflection auto trains up to ten ensembles per fit.
    epochs: int = 150
    learning_rate: float = 1.5e-2
    weight_decay: float = 1e-3
    seed: int = 0
    threads: int = 1  # tiny full-batch problems: more threads only add overhead
    # Training precision: features are standardised and targets scaled to unit RMS, so single
    # precision loses nothing a correction of micrometres could show, at half the arithmetic.
    # Predictions always run in double precision.
    precision: str = "float32"

    def __post_init__(self):
        for name in ("members", "hidden", "layers", "epochs", "threads"):
            if getattr(self, name) < 1:
                raise InputError(f"residual {setting(name)} must be at least 1, got {getattr(self, name)}.")
        if not self.learning_rate > 0:
            raise InputError(f"residual {setting('learning_rate')} must be positive, got {self.learning_rate}.")
        if not self.weight_decay >= 0:
            raise InputError(f"residual {setting('weight_decay')} must be >= 0, got {self.weight_decay}.")
        if self.precision not in ("float32", "float64"):
            raise InputError(f"residual {setting('precision')} must be 'float32' or 'float64', got {self.precision!r}.")


def _layer_sizes(inputs: int, config: ResidualConfig) -> list[tuple[int, int]]:
    sizes, width = [], inputs
    for _ in range(config.layers):
        sizes.append((width, config.hidden))
        width = config.hidden
    return sizes + [(width, 3)]


def _initial_state(inputs: int, config: ResidualConfig, member: int) -> dict:
    """A member's starting weights, as ``torch.nn.Linear`` draws them (uniform within 1/sqrt(fan_in),
    weight then bias, layer by layer) from the seed ``seed * 1000 + member``; keys are those of the
    ``torch.nn.Sequential`` of Linear and Tanh layers the file format names."""
    import torch  # torch takes 2 s to load; only training a residual needs it

    generator = torch.Generator().manual_seed(config.seed * 1000 + member)
    state = {}
    for k, (fan_in, fan_out) in enumerate(_layer_sizes(inputs, config)):
        bound = 1.0 / np.sqrt(fan_in)
        state[f"{2 * k}.weight"] = torch.empty(fan_out, fan_in).uniform_(-bound, bound, generator=generator).numpy().astype(float)
        state[f"{2 * k}.bias"] = torch.empty(fan_out).uniform_(-bound, bound, generator=generator).numpy().astype(float)
    return state


def _stack(states: list[dict], layers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Members' states -> per layer (weights (M, in, out), biases (M, 1, out)) for a batched forward pass."""
    return [(np.stack([np.asarray(s[f"{2 * k}.weight"], float).T for s in states]),
             np.stack([np.asarray(s[f"{2 * k}.bias"], float)[None] for s in states])) for k in range(layers + 1)]


def _forward(stacks: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    """(M, N, 3) outputs of every member for standardised inputs x (N, F) or (M, N, F)."""
    h = x
    for k, (weights, biases) in enumerate(stacks):
        h = h @ weights + biases
        if k < len(stacks) - 1:
            h = np.tanh(h)
    return h


def features(chain, q: np.ndarray, torques: np.ndarray) -> np.ndarray:
    """(N, 5 dof) raw features: joint readings (N, dof) rad, gravity torques (N, dof) N m, and per joint
    the base-frame tip displacement a unit compliance would cause, ``J_j(q) * tau_j`` (N, 3 dof) m/(rad/(N m)).

    The last block makes sag-like residuals (elastic links, gear play that follows the torque)
    nearly linear in the features, which a few hundred poses can learn; q and tau alone are too
    little data for a 14-dimensional function. ``chain``: a :class:`rigs.kinematics.ArmModel`.
    """
    q, torques = np.atleast_2d(q), np.atleast_2d(torques)
    _, velocity = BatchKinematics(chain).tip_velocity_columns(q)  # (N, 3, dof), base frame
    sag = np.swapaxes(velocity * torques[:, None, :], 1, 2).reshape(len(q), -1)
    return np.concatenate([q, torques, sag], axis=1)


def _nearest_distances(queries: np.ndarray, reference: np.ndarray, exclude_self: bool = False) -> np.ndarray:
    """(N,) Euclidean distance of each query row to its nearest reference row."""
    tree = scipy.spatial.cKDTree(reference)
    distances, _ = tree.query(queries, k=2 if exclude_self else 1)
    return distances[:, 1] if exclude_self else distances


@dataclass
class ResidualModel:
    """A trained ensemble; ``predict(raw_features)`` answers with guards applied."""

    config: ResidualConfig
    feature_mean: np.ndarray  # (F,)
    feature_scale: np.ndarray  # (F,)
    target_scale: float  # m: residuals are learned in units of this
    bound_m: float  # largest correction norm allowed, m
    reference_distance: float  # d_ref, standardised feature units
    training_features: np.ndarray  # (N, F) standardised
    states: list[dict]  # one state_dict per member: numpy arrays under torch.nn.Sequential's keys
    training_rms_m: float = float("nan")  # RMS of the training residual norms
    gain: float = 1.0  # out-of-bag gain in [0, 1]

    @property
    def inputs(self) -> int:
        return len(self.feature_mean)

    def _stacks(self) -> list[tuple[np.ndarray, np.ndarray]]:
        if getattr(self, "_stacked", None) is None:
            self._stacked = _stack(self.states, self.config.layers)
        return self._stacked

    def raw(self, raw_features: np.ndarray) -> np.ndarray:
        """(members, N, 3) m unguarded member outputs."""
        x = (np.atleast_2d(raw_features) - self.feature_mean) / self.feature_scale
        return _forward(self._stacks(), x) * self.target_scale

    def predict(self, raw_features: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Guarded correction (N, 3) m, its spread (N, 3) m (ensemble std after shrinking) and the
        shrink factor (N, 3) in [0, 1] (agreement times proximity)."""
        outputs = self.raw(raw_features)
        mean, variance = self.gain * outputs.mean(axis=0), outputs.var(axis=0)
        agreement = mean ** 2 / np.maximum(mean ** 2 + variance, 1e-300)
        standardised = (np.atleast_2d(raw_features) - self.feature_mean) / self.feature_scale
        distance = _nearest_distances(standardised, self.training_features)
        excess = np.maximum(0.0, distance / self.reference_distance - 1.0)
        proximity = np.exp(-0.5 * excess ** 2)
        shrink = agreement * proximity[:, None]
        correction = mean * shrink
        norm = np.linalg.norm(correction, axis=1, keepdims=True)
        correction = correction * np.minimum(1.0, self.bound_m / np.maximum(norm, 1e-300))
        spread = np.sqrt(variance) * proximity[:, None]
        return correction, spread, shrink

    def correct(self, chain, q: np.ndarray, payload_kg, payload_com) -> np.ndarray:
        """(N, 3) m base-frame tip correction at joint readings q (N, dof) with payloads (N,) kg."""
        q = np.atleast_2d(q)
        return self.predict(features(chain, q, gravity_torques(chain, q, payload_kg, payload_com)))[0]

    # -- files ------------------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        import torch  # torch takes 2 s to load; only a learned residual needs it

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"feature_mean": torch.as_tensor(self.feature_mean), "feature_scale": torch.as_tensor(self.feature_scale),
                   "training_features": torch.as_tensor(self.training_features)}
        for i, state in enumerate(self.states):
            for key, value in state.items():
                tensors[f"member{i}.{key}"] = torch.as_tensor(np.asarray(value, float))
        torch.save(tensors, folder / WEIGHTS_FILE)
        document = {"format": FORMAT, "format_version": FORMAT_VERSION, "config": asdict(self.config),
                    "inputs": self.inputs, "input_features": "joint readings (rad), gravity torques (N m), per joint J_j(q) tau_j (base frame); chain order",
                    "output": "tip correction (m) in the base frame, added to every reflector",
                    "target_scale_m": self.target_scale, "bound_m": self.bound_m,
                    "reference_distance": self.reference_distance, "training_rms_m": self.training_rms_m,
                    "out_of_bag_gain": self.gain}
        atomic_write_text(folder / CONFIG_FILE, json.dumps(document, indent=2))

    @classmethod
    def load(cls, folder: Path) -> "ResidualModel":
        import torch  # torch takes 2 s to load; only a learned residual needs it

        folder = Path(folder)
        config_path, weights_path = folder / CONFIG_FILE, folder / WEIGHTS_FILE
        for path in (config_path, weights_path):
            if not path.is_file():
                raise InputError(f"{path}: missing; the learned residual model is incomplete.")
        document = read_json(config_path, "residual model configuration")
        top = check_format(document, config_path, FORMAT, FORMAT_VERSION, "selfcal residual model configuration")
        top.get("config", "table")
        scalars = {k: top.get(k, "number") for k in ("target_scale_m", "bound_m", "reference_distance", "out_of_bag_gain")}
        rms = document.get("training_rms_m")  # informative only; NaN (unknown) is written as it is
        if rms is not None and (isinstance(rms, bool) or not isinstance(rms, (int, float))):
            raise InputError(f"{top.where('training_rms_m')} should be a number, got {rms!r}.")
        try:
            config = ResidualConfig(**document["config"])
        except TypeError as error:
            raise InputError(f"{config_path}: key 'config' is not a residual model configuration ({error}).") from None
        except InputError as error:  # a file's keys, not a caller's settings: named as written in it
            raise InputError(f"{config_path}: key 'config': {error}") from None
        tensors = load_torch(weights_path, "residual model weights file")
        if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
            raise InputError(f"{weights_path}: not a residual model weights file (expected named tensors).")
        try:
            states = []
            for i in range(config.members):
                prefix = f"member{i}."
                states.append({k[len(prefix):]: v.numpy().astype(float) for k, v in tensors.items() if k.startswith(prefix)})
            model = cls(config, tensors["feature_mean"].numpy(), tensors["feature_scale"].numpy(),
                        scalars["target_scale_m"], scalars["bound_m"], scalars["reference_distance"],
                        tensors["training_features"].numpy(), states, float("nan" if rms is None else rms),
                        scalars["out_of_bag_gain"])
            # Shapes must match the configuration.
            expected = [(fan_out, fan_in) for fan_in, fan_out in _layer_sizes(model.inputs, config)]
            for state in states:
                for k, shape in enumerate(expected):
                    if state[f"{2 * k}.weight"].shape != shape or state[f"{2 * k}.bias"].shape != (shape[0],):
                        raise ValueError(f"layer {k} of a member is not {shape[0]} x {shape[1]}")
        except (KeyError, RuntimeError, ValueError, AttributeError) as error:
            raise InputError(f"{weights_path}: does not match {config_path.name} ({first_line(error)}).") from None
        return model


class ResidualEnsemble:
    """Configure, then ``fit(raw_features (N, F), residuals (N, 3) m) -> ResidualModel``.

    Each member starts from its own seed and trains on its own bootstrap resample (full batch,
    Adam, weight decay), so the members' spread reflects what the data leave open.
    ``fit_many`` trains several ensembles (one per data set) in one batched run.
    """

    def __init__(self, config: ResidualConfig | None = None):
        self.config = config or ResidualConfig()

    def fit(self, raw_features: np.ndarray, residuals: np.ndarray) -> ResidualModel:
        return self.fit_many([(raw_features, residuals)])[0]

    def fit_many(self, datasets: list[tuple[np.ndarray, np.ndarray]]) -> list[ResidualModel]:
        """One :class:`ResidualModel` per (raw_features (N_d, F), residuals (N_d, 3)) data set."""
        import torch  # torch takes 2 s to load; only a learned residual needs it

        config = self.config
        prepared = []
        for raw_features, residuals in datasets:
            raw_features, residuals = np.atleast_2d(raw_features).astype(float), np.atleast_2d(residuals).astype(float)
            if len(raw_features) != len(residuals) or residuals.shape[1] != 3:
                raise ValueError("features (N, F) and residuals (N, 3) must have the same N")
            if len(raw_features) < 10:
                raise InputError(f"a learned residual needs at least 10 calibration poses, got {len(raw_features)}.")
            mean = raw_features.mean(axis=0)
            scale = raw_features.std(axis=0)
            scale = np.where(scale > 1e-12, scale, 1.0)  # a constant feature (e.g. a vertical axis's zero torque)
            x = (raw_features - mean) / scale
            norms = np.linalg.norm(residuals, axis=1)
            target_scale = float(max(np.sqrt(np.mean(norms ** 2)), 1e-9))
            rng = np.random.default_rng(config.seed)
            samples = [rng.integers(0, len(x), len(x)) for _ in range(config.members)]
            prepared.append((x, residuals / target_scale, mean, scale, target_scale, norms, samples))
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(config.threads)
        try:
            states = _train_batched([(x, y, samples) for x, y, _, _, _, _, samples in prepared], config)
        finally:
            torch.set_num_threads(previous_threads)
        models = []
        for (x, y, mean, scale, target_scale, norms, samples), members in zip(prepared, states):
            outputs = _forward(_stack(members, config.layers), x)  # (M, N, 3)
            unseen = np.ones((len(samples), len(x)), bool)
            for m, sample in enumerate(samples):
                unseen[m, sample] = False
            out_of_bag_sum = np.einsum("mn,mnk->nk", unseen.astype(float), outputs)
            out_of_bag_count = unseen.sum(axis=0).astype(float)
            seen = out_of_bag_count > 0
            honest = out_of_bag_sum[seen] / out_of_bag_count[seen, None]
            # The least-squares gain of the honest predictions: 0 when they explain none of the residual.
            gain = float(np.clip(np.sum(y[seen] * honest) / max(np.sum(honest ** 2), 1e-300), 0.0, 1.0)) if seen.any() else 0.0
            reference = float(np.percentile(_nearest_distances(x, x, exclude_self=True), 95)) if len(x) > 1 else 1.0
            models.append(ResidualModel(config, mean, scale, target_scale, float(norms.max()), max(reference, 1e-9), x,
                                        members, float(np.sqrt(np.mean(norms ** 2))), gain))
        return models


def _train_batched(datasets: list[tuple[np.ndarray, np.ndarray, list[np.ndarray]]], config: ResidualConfig) -> list[list[dict]]:
    """Train every member of every data set in one run; returns their state_dicts per data set.

    ``datasets``: (standardised features (N_d, F), scaled residuals (N_d, 3), one bootstrap sample
    (N_d,) per member). Members start from :func:`_initial_state`; their
    weights are stacked ((B, in, out) for ``bmm``), their distinct rows padded with rows of weight
    0, so the summed loss gives every member its own gradient.
    """
    import torch  # torch takes 2 s to load; only a learned residual needs it

    dtype = {"float32": torch.float32, "float64": torch.float64}[config.precision]
    inputs = datasets[0][0].shape[1]
    starts, xs, ys, weights, sizes = [], [], [], [], []
    # A bootstrap sample repeats about a third of its rows: train on the distinct rows weighted by
    # how often they were drawn (the same loss, a third less arithmetic).
    drawn = [np.unique(sample, return_counts=True) for _, _, samples in datasets for sample in samples]
    longest = max(len(rows) for rows, _ in drawn)
    member = 0
    for x, y, samples in datasets:
        for index, sample in enumerate(samples):
            starts.append(_initial_state(inputs, config, index))
            rows, counts = drawn[member]
            member += 1
            pad = longest - len(rows)
            xs.append(np.concatenate([x[rows], np.zeros((pad, x.shape[1]))]))
            ys.append(np.concatenate([y[rows], np.zeros((pad, 3))]))
            weights.append(np.concatenate([counts.astype(float), np.zeros(pad)]))
            sizes.append(len(sample))
    parameters = []
    for layer_weights, layer_biases in _stack(starts, config.layers):  # (B, in, out) and (B, 1, out)
        parameters.append(torch.as_tensor(layer_weights, dtype=dtype).clone().requires_grad_(True))
        parameters.append(torch.as_tensor(layer_biases, dtype=dtype).clone().requires_grad_(True))
    layers = len(parameters) // 2
    x = torch.as_tensor(np.stack(xs), dtype=dtype)
    y = torch.as_tensor(np.stack(ys), dtype=dtype)
    # Each member's loss is the mean over its own N_d x 3 entries, as when trained alone.
    w = (torch.as_tensor(np.stack(weights))[:, :, None]
         / (3.0 * torch.as_tensor(sizes, dtype=torch.float64))[:, None, None]).to(dtype)
    optimiser = torch.optim.Adam(parameters, lr=config.learning_rate, weight_decay=config.weight_decay, foreach=True)
    for _ in range(config.epochs):
        optimiser.zero_grad()
        h = x
        for k in range(layers):
            h = torch.baddbmm(parameters[2 * k + 1], h, parameters[2 * k])
            if k < layers - 1:
                h = torch.tanh(h)
        loss = torch.sum(w * (h - y) ** 2)
        loss.backward()
        optimiser.step()
    out, b = [], 0
    for _, _, samples in datasets:
        members = []
        for _ in samples:
            state = {}
            for k in range(layers):
                state[f"{2 * k}.weight"] = parameters[2 * k][b].detach().T.to(torch.float64).numpy().copy()
                state[f"{2 * k}.bias"] = parameters[2 * k + 1][b, 0].detach().to(torch.float64).numpy().copy()
            members.append(state)
            b += 1
        out.append(members)
    return out
