"""A fleet's self-models against each other: each link's deviation from the description, Chamfer.

``selfcal selfmodel check`` says, per link, how far what the cameras measured sits from the URDF
(a joint correction's reach, added or missing matter) and gives each arm a verdict of its own.
Against its siblings a link is also flagged when its figure is far above the fleet's for the same
link (robust z, one-sided, threshold and floor in :mod:`selfcal.fleet.compare`): what one arm alone
cannot put beside an intact control. Chamfer-L1 against the simulated truth, where the held-out
session has it, is compared the same way on a log scale.

GPUs: an arm's task asks Ray for one GPU only where the cluster has GPUs and ``selfcal selfmodel
train`` can put its training on one (a ``--device`` option, which it is then given as ``auto``, so
a worker whose torch cannot use the GPU still trains, on its CPUs). Where either is missing the
tasks ask for CPUs alone, and fleet.json says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from selfcal.fleet.compare import FLOORS, MIN_ARMS, THRESHOLD, distribution

DEVICE_OPTION = "--device"


def gpu_plan(cluster_gpus: float, train_has_device: bool) -> tuple[float, str]:
    """(GPUs per arm, why) for a cluster with ``cluster_gpus`` GPUs."""
    if cluster_gpus < 1:
        return 0.0, "the cluster has no GPU, so every arm trains on its CPUs"
    if not train_has_device:
        return 0.0, (f"the cluster has {cluster_gpus:g} GPUs, but `selfcal selfmodel train` in this selfcal has no "
                     f"{DEVICE_OPTION} option (it trains on CPUs), so no GPU is reserved")
    return 1.0, f"one of the cluster's {cluster_gpus:g} GPUs per arm ({DEVICE_OPTION} auto: the CPU where torch cannot use it)"


def relocate_training_sessions(model_folder: Path, table_folder: Path, sessions: list[str]) -> None:
    """Point a model's recorded training sessions (relative to the model folder) at the table's own
    sessions, as ``selfcal selfmodel train`` run from the table's folder into DIR/<arm> would have."""
    path = Path(model_folder) / "config.json"
    if not path.is_file():
        return
    from selfmodel.model.folder import read_config

    config = read_config(model_folder)  # the model just trained: checked like any other
    training = config.get("training")
    if not isinstance(training, dict) or "sessions" not in training:
        return
    training["sessions"] = [os.path.relpath((Path(table_folder) / s).resolve(), Path(model_folder).resolve())
                            for s in sessions]
    from rigs.files import atomic_write_json

    atomic_write_json(path, config)


def arm_figures(outputs: dict) -> dict:
    train = outputs.get("train") or {}
    evaluation = outputs.get("eval") or {}
    check = outputs.get("check") or {}
    # ``selfmodel check --json`` prints its verdict beside the per-link rows.
    check = check.get("links", []) if isinstance(check, dict) else check
    figures = {"steps": train.get("steps"), "train_seconds": train.get("seconds"), "final_loss": train.get("final_loss"),
               "links": {row["link"]: {"deviation_mm": row["deviation_mm"], "kind": row["kind"]} for row in check}}
    for key in ("chamfer_l1_mm", "chamfer_pct_workspace", "fscore", "iou", "false_free_rate"):
        figures[key] = evaluation.get(key)
    if check:
        top = max(check, key=lambda row: row["deviation_mm"])
        figures["largest_deviation"] = f"{top['link']} {top['deviation_mm']:.1f} mm ({top['kind']})"
    return figures


def add_selfmodel_comparison(document: dict, out: Path, table_folder: Path) -> None:
    """Figures, per-link distributions, flags and damage verdicts of the arms that trained."""
    ok = {arm: record for arm, record in document["arms"].items() if record["status"] == "ok"}
    figures = {arm: arm_figures(record.get("outputs") or {}) for arm, record in ok.items()}
    comparison = {"threshold": THRESHOLD, "min_arms": MIN_ARMS, "floors": FLOORS,
                  "method": ("Each link's deviation from the description (selfcal selfmodel check) against the same "
                             "link's across the fleet, and Chamfer-L1 on a log scale: robust z = (value - median) / "
                             "max(1.4826 MAD, floor), one-sided (worse than the siblings)."),
                  "links": {}, "chamfer": None, "compared": len(ok) >= MIN_ARMS}
    flags: dict[str, list[str]] = {arm: [] for arm in ok}
    details: dict[str, list[dict]] = {arm: [] for arm in ok}
    if len(ok) >= MIN_ARMS:
        links = sorted({link for figure in figures.values() for link in figure["links"]})
        for link in links:
            values = {arm: figure["links"][link]["deviation_mm"] for arm, figure in figures.items() if link in figure["links"]}
            if len(values) < MIN_ARMS:
                continue
            spread = distribution(values, FLOORS["link_mm"], "mm")
            comparison["links"][link] = spread
            for arm, z in spread["z"].items():
                if z > THRESHOLD:
                    kind = figures[arm]["links"][link]["kind"]
                    hint = f"a bent {link}?" if kind.startswith("joint") else "damage, or something bolted on?"
                    flags[arm].append(f"{arm}: {link} deviates {values[arm]:.1f} mm from its description ({kind}) "
                                      f"against the fleet median {spread['median']:.1f} mm (robust z {z:+.0f}, "
                                      f"threshold {THRESHOLD:g}): {hint}")
                    details[arm].append({"kind": "link", "link": link, "value": values[arm],
                                         "median": spread["median"], "z": z, "check_kind": kind})
        chamfer = {arm: figure["chamfer_l1_mm"] for arm, figure in figures.items() if figure.get("chamfer_l1_mm")}
        if len(chamfer) >= MIN_ARMS:
            logs = distribution({arm: float(np.log10(v)) for arm, v in chamfer.items()}, FLOORS["log10"], "log10")
            comparison["chamfer"] = {"median_mm": 10 ** logs["median"], "values_mm": chamfer, "z": logs["z"]}
            for arm, z in logs["z"].items():
                if z > THRESHOLD:
                    flags[arm].append(f"{arm}: Chamfer-L1 {chamfer[arm]:.2f} mm against the fleet median "
                                      f"{10 ** logs['median']:.2f} mm (robust z {z:+.0f} on a log scale, threshold "
                                      f"{THRESHOLD:g}): too few views, or a training that did not converge?")
                    details[arm].append({"kind": "chamfer", "value": chamfer[arm], "median": 10 ** logs["median"], "z": z})
    for arm, record in ok.items():
        figure = figures[arm]
        link_flags = [d for d in details[arm] if d["kind"] == "link"]
        if not comparison["compared"]:
            figure["damage"] = f"not compared: fewer than {MIN_ARMS} arms trained"
        elif link_flags:
            worst = max(link_flags, key=lambda d: d["z"])
            figure["damage"] = f"{worst['link']} far from its siblings ({worst['value']:.1f} mm, fleet {worst['median']:.1f} mm)"
        else:
            figure["damage"] = "no link far from its siblings"
        record["figures"], record["flags"], record["flag_details"] = figure, flags[arm], details[arm]
        record["flagged"] = bool(flags[arm])
    document["comparison"] = comparison
