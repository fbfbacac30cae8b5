"""``selfcal predict`` and ``selfcal correct``: use a calibration (with its deflection model) offline."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from selfcal.ui import print_json, progress_bar, user_errors


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
    app.command("correct")(correct)


def _payload(value: Optional[float]) -> float:
    from rigs.errors import InputError

    if value is not None and value < 0:
        raise InputError(f"--payload must not be negative, got {value} kg.")
    return 0.0 if value is None else float(value)


def _identified_payload(calibration, value: Optional[float], payload_file: Optional[Path]):
    """(calibration, default payload kg): with ``--payload-file`` (a payload.yaml from `selfcal
    dynamics payload`) its mass, and the calibration's deflection evaluated at its centre of mass."""
    import dataclasses

    from rigs.errors import InputError

    if payload_file is None:
        return calibration, _payload(value)
    if value is not None:
        raise InputError("give --payload or --payload-file, not both.")
    from calib.dynamics.files import read_payload

    identified = read_payload(payload_file)
    if identified["mass_kg"] == 0 or identified["com"] is None:
        return calibration, 0.0
    if identified.get("frame") not in (None, calibration.summary.get("tip_link")):
        raise InputError(f"{payload_file}: gives the centre of mass in {identified['frame']!r}'s frame, the "
                         f"calibration's tip link is {calibration.summary.get('tip_link')!r}.")
    return dataclasses.replace(calibration, payload_com=identified["com"]), float(identified["mass_kg"])


def _limits(calibration_dir: Path, calibration):
    """The calibrated chain's joint limits and reach (:class:`rigs.limits.ArmJoints`), from its robot.urdf."""
    from calib.io.document import read_calibration_document
    from rigs.files import inside_folder
    from rigs.limits import ArmJoints

    path, document = read_calibration_document(calibration_dir)
    urdf = inside_folder(Path(calibration_dir), document["robot"].get("urdf", "robot.urdf"), f"{path}: key 'robot.urdf'")
    return ArmJoints.from_urdf(urdf, calibration.summary["base_link"], calibration.summary["tip_link"])


def _check_joints(q, path: Path, limits) -> None:
    from rigs.limits import check_joint_values

    check_joint_values(q, q, limits.names, limits.types, limits.lower, limits.upper,
                       [f"row {n}" for n in range(2, len(q) + 2)], path, "rad", unit_setting=None)


def predict(
    calibration_dir: Path = typer.Argument(..., help="Calibration folder written by `selfcal calibrate`."),
    joints: Path = typer.Option(..., "--joints", help="CSV: name, one column per chain joint (rad), optional payload_kg."),
    payload: Optional[float] = typer.Option(None, "--payload", help="Payload in kg for rows without payload_kg (default 0)."),
    payload_file: Optional[Path] = typer.Option(None, "--payload-file", help="payload.yaml from `selfcal dynamics "
                                                "payload`: its mass for rows without payload_kg, at its centre of mass."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of CSV."),
) -> None:
    """Tip and reflector positions (m, base frame) with 1-sigma uncertainty, deflection included."""
    with user_errors():
        import numpy as np

        from calib.calibration import Calibration
        from calib.deflection.uncertainty import predict_points
        from calib.workflows.compensate import read_joints

        calibration, default = _identified_payload(Calibration.load(calibration_dir), payload, payload_file)
        names, q, row_payload = read_joints(joints, calibration.joint_names)
        _check_joints(q, joints, _limits(calibration_dir, calibration))
        row_payload = np.where(np.isnan(row_payload), default, row_payload)
        warning = calibration.envelope_warning(q, str(joints), row_payload)
        if warning and not json_output:
            typer.echo(f"warning: {warning}", err=True)
        points = {"tip": np.zeros(3), **calibration.targets}
        predicted = predict_points(calibration, q, row_payload, points)
        rows = []
        for n, name in enumerate(names):
            for point, (xyz, covariance) in predicted.items():
                std = np.sqrt(np.clip(np.diag(covariance[n]), 0.0, None))
                rows.append({"name": name, "point": point, "payload_kg": float(row_payload[n]),
                             "x": float(xyz[n, 0]), "y": float(xyz[n, 1]), "z": float(xyz[n, 2]),
                             "std_x": float(std[0]), "std_y": float(std[1]), "std_z": float(std[2])})
        if json_output:
            print_json({"calibration": str(calibration_dir), "frame": calibration.summary.get("base_link"),
                        "units": "m", "deflection": (calibration.deflection or {}).get("mode", "none"), "points": rows,
                        "envelope_warning": warning})
        else:
            typer.echo("name,point,payload_kg,x,y,z,std_x,std_y,std_z")
            for r in rows:
                typer.echo(f"{r['name']},{r['point']},{r['payload_kg']:g},{r['x']:.7f},{r['y']:.7f},{r['z']:.7f},"
                           f"{r['std_x']:.3e},{r['std_y']:.3e},{r['std_z']:.3e}")


def correct(
    calibration_dir: Path = typer.Argument(..., help="Calibration folder written by `selfcal calibrate`."),
    targets: Path = typer.Option(..., "--targets", help="CSV: name,x,y,z[,target][,payload_kg][,joint seed columns]; m, base frame."),
    payload: Optional[float] = typer.Option(None, "--payload", help="Payload in kg for rows without payload_kg (default 0)."),
    payload_file: Optional[Path] = typer.Option(None, "--payload-file", help="payload.yaml from `selfcal dynamics "
                                                "payload`: its mass for rows without payload_kg, at its centre of mass."),
    nominal_urdf: Optional[Path] = typer.Option(None, "--nominal-urdf", help="URDF whose IK solution seeds each row "
                                                "(default the calibration's rigid robot.urdf)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the corrected joints as CSV here."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of CSV."),
) -> None:
    """Joint angles that put the tip (or a named reflector) at wanted positions under the calibrated model."""
    with user_errors():
        import csv
        import io

        import numpy as np

        from calib.calibration import Calibration
        from calib.workflows.compensate import correct as run_correct
        from calib.workflows.compensate import read_targets
        from rigs.errors import InputError
        from rigs.files import atomic_write_text, check_new_file
        from rigs.kinematics import ArmModel
        from rigs.limits import check_reachable

        if out is not None:
            check_new_file(out, force)
        calibration, default = _identified_payload(Calibration.load(calibration_dir), payload, payload_file)
        rows = read_targets(targets, calibration.joint_names, list(calibration.targets))
        limits = _limits(calibration_dir, calibration)
        offsets = max([float(np.linalg.norm(v)) for v in calibration.targets.values()], default=0.0)
        check_reachable(rows.xyz, limits.reach, offsets, targets, [f"row {n}" for n in range(2, len(rows.names) + 2)])
        if rows.seeds is not None:
            _check_joints(rows.seeds, targets, limits)
        base, tip = calibration.summary["base_link"], calibration.summary["tip_link"]
        nominal = ArmModel.from_urdf(nominal_urdf, base, tip) if nominal_urdf is not None else calibration.chain
        if nominal.joint_names != calibration.joint_names:
            raise InputError(f"{nominal_urdf}: its chain moves {nominal.joint_names}, the calibration's {calibration.joint_names}.")
        with progress_bar("correcting", None, unit="targets"):
            result = run_correct(calibration, rows, nominal, default)
        payloads = np.where(np.isnan(rows.payload_kg), default, rows.payload_kg)
        warning = calibration.envelope_warning(result.q, f"the corrected joints of {targets}", payloads)
        if warning and not json_output:
            typer.echo(f"warning: {warning}", err=True)
        header = ["name", "target", "payload_kg", *calibration.joint_names, "residual_m", "uncorrected_error_m"]
        # The csv module quotes a name with a comma or a quote in it, as every spreadsheet reads it.
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        records = []
        for n, name in enumerate(rows.names):
            writer.writerow([name, rows.points[n], f"{payloads[n]:g}", *(f"{v:.9f}" for v in result.q[n]),
                             f"{result.residual_m[n]:.3e}", f"{result.nominal_error_m[n]:.3e}"])
            records.append({"name": name, "target": rows.points[n], "payload_kg": float(payloads[n]),
                            "q": [float(v) for v in result.q[n]], "residual_m": float(result.residual_m[n]),
                            "uncorrected_error_m": float(result.nominal_error_m[n])})
        text = buffer.getvalue()
        if out is not None:
            atomic_write_text(out, text)
        if json_output:
            print_json({"calibration": str(calibration_dir), "deflection": (calibration.deflection or {}).get("mode", "none"),
                        "joint_names": calibration.joint_names, "rows": records,
                        "max_residual_m": float(result.residual_m.max()), "envelope_warning": warning})
        else:
            typer.echo(text, nl=False)
