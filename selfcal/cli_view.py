"""``selfcal view FOLDER``: any result folder in 3D, live in the browser (viser), changing nothing."""

from __future__ import annotations

import sys
import webbrowser
from pathlib import Path
from typing import Optional

import typer

from rigs.errors import InputError
from selfcal.ui import err_console, print_json, user_errors

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def register(app: typer.Typer) -> None:
    app.command("view")(view)


def view(
    folder: Path = typer.Argument(..., help="A calibration, self-model, collision export or fleet folder."),
    port: Optional[int] = typer.Option(None, "--port", help="Port to serve on (default: a free one, printed)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind: this machine only by default; another "
                                                          "(0.0.0.0: every network) lets others on the network see it."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Print the address only; open no browser."),
    no_check: bool = typer.Option(False, "--no-check", help="A self-model: skip the damage check that colours its links."),
    json_output: bool = typer.Option(False, "--json", help="Print the address as JSON ({\"url\", \"host\", \"port\", \"kind\"})."),
) -> None:
    """Open a local 3D viewer of a result folder: joint sliders, the arm, what was measured and fitted.
    Ctrl-C stops it."""
    from selfcal.view.kinds import scene_of
    from selfcal.view.live import start, wait_until_interrupted

    with user_errors():
        if port is not None and not 0 < port < 65536:
            raise InputError(f"--port {port}: a port is a number from 1 to 65535.")
        scene = scene_of(folder, check=not no_check)
        try:
            live = start(scene, host, port)
        except OSError as error:
            raise InputError(f"--host {host} --port {port}: cannot serve there ({error.strerror or error}).") from None
        if port is not None and live.server.get_port() != port:  # viser moves on to the next free port
            live.stop()
            raise InputError(f"--port {port}: already in use on {host}; choose another, or leave --port out for a free one.")

    def announce() -> None:
        if json_output:
            print_json({"url": live.url, "host": host, "port": live.server.get_port(), "kind": scene.kind,
                        "title": scene.title})
        else:
            typer.echo(f"{scene.title}: {live.url}  (Ctrl-C stops)")
            if host not in LOCAL_HOSTS:
                err_console.print(f"serving on {host}: other machines that reach it can see this view.", highlight=False)
        sys.stdout.flush()  # a script reading the address gets it before the server blocks
        if not no_browser:
            webbrowser.open(live.url)

    wait_until_interrupted(live, announce)
