"""A kubeconfig exec credential plugin for tests, and the API server's side of it.

:class:`ExecPlugin` writes a kubeconfig whose user is an exec plugin (as EKS, GKE and AKS
kubeconfigs are): a small script printing an ``ExecCredential`` with a fresh random token that
expires ``lifetime`` seconds later. Every token it issues is recorded with its expiry;
:meth:`ExecPlugin.accepts` is the emulator's token check (``Emulator.tokens``): only a token the
plugin issued and that has not expired. ``failing`` makes the plugin exit 1 (a broken ``aws``
CLI, expired SSO session); ``slow`` makes it take that many seconds before answering (an SSO
round trip, a hung plugin); :meth:`ExecPlugin.runs` counts its runs, failed ones included (a run
is counted when it starts).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

API_VERSION = "client.authentication.k8s.io/v1"

SCRIPT = """\
import json, os, secrets, sys, time
state, lifetime = sys.argv[1], float(sys.argv[2])
with open(os.path.join(state, "runs"), "a") as out:
    out.write("run\\n")
if os.path.exists(os.path.join(state, "failing")):
    sys.stderr.write("plugin: session expired, log in again\\n")
    sys.exit(1)
if os.path.exists(os.path.join(state, "slow")):
    with open(os.path.join(state, "slow")) as f:
        time.sleep(float(f.read()))
token = secrets.token_hex(16)
expires = int(time.time() + lifetime)  # RFC 3339 to the second: the expiry as sent
with open(os.path.join(state, "issued"), "a") as out:
    out.write(f"{token} {expires}\\n")
status = {"token": token,
          "expirationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))}
print(json.dumps({"apiVersion": API, "kind": "ExecCredential", "status": status}))
"""

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: kmock, cluster: {{server: "{url}"}}}}]
users: [{{name: op, user: {{exec: {exec}}}}}]
contexts: [{{name: kmock, context: {{cluster: kmock, user: op, namespace: {ns}}}}}]
current-context: kmock
"""


class ExecPlugin:
    """The plugin's script and state in ``state`` (a directory), its tokens valid ``lifetime``
    seconds."""

    def __init__(self, state: Path, lifetime: float) -> None:
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        self.script = state / "plugin.py"
        self.script.write_text(f"API = {API_VERSION!r}\n" + SCRIPT)
        self.lifetime = lifetime

    def kubeconfig(self, path: Path, url: str, namespace: str = "apps") -> Path:
        """A kubeconfig for ``url`` whose user runs this plugin."""
        spec = {
            "apiVersion": API_VERSION,
            "command": sys.executable,
            "args": ["-I", "-S", str(self.script), str(self.state), str(self.lifetime)],
            "interactiveMode": "Never",
        }
        path.write_text(KUBECONFIG.format(url=url, exec=json.dumps(spec), ns=namespace))
        return path

    @property
    def failing(self) -> bool:
        return (self.state / "failing").exists()

    @failing.setter
    def failing(self, value: bool) -> None:
        flag = self.state / "failing"
        if value:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    @property
    def slow(self) -> float:
        """Seconds a run takes before it answers (0: at once)."""
        flag = self.state / "slow"
        return float(flag.read_text()) if flag.exists() else 0.0

    @slow.setter
    def slow(self, seconds: float) -> None:
        flag = self.state / "slow"
        if seconds:
            flag.write_text(str(seconds))
        else:
            flag.unlink(missing_ok=True)

    def issued(self) -> list[tuple[str, int]]:
        """(token, expiry in Unix seconds) of every token issued, oldest first."""
        path = self.state / "issued"
        lines = path.read_text().split("\n") if path.exists() else []
        return [(token, int(expires)) for token, expires in (ln.split() for ln in lines if ln)]

    def runs(self) -> int:
        path = self.state / "runs"
        return len(path.read_text().split()) if path.exists() else 0

    def accepts(self, token: str | None) -> bool:
        """Whether the API server takes ``token`` now: issued by the plugin, not expired."""
        now = time.time()
        return any(token == issued and now < expires for issued, expires in self.issued())
