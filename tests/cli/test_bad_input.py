"""Every boundary answers in one line: the `redlease` command's table of bad input.

Each row is a real ``python -m redlease`` process: (argv, env, expected exit status, a fragment
of the one stderr line). Every row also holds that stderr is that one line and no traceback.
The whole table runs twice: with every extra installed, and as an installation with only the
runtime (``sidecar``) extra would be — ``kopf``, ``kubernetes`` and ``yaml`` hidden by a
``sitecustomize`` whose import hook answers ``ModuleNotFoundError`` for them, as Python does for
a package that is not installed. Rows that need a hidden package expect the install hint then.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from redlease.devtools.sidecarprocs import ROOT, env

DEAD = "redis://127.0.0.1:1/0"  # nothing listens on port 1: unreachable at once
LOCK = ["--lock", "x"]
OPERATOR_HINT = "pip install 'redlease[operator]'"
HIDDEN = ("kopf", "kubernetes", "yaml")

HIDER = """
import importlib.abc, os, sys
_HIDDEN = set(os.environ.get("REDLEASE_TEST_HIDE", "").split(","))
class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Hide())
"""

# (id, argv, env, exit status, stderr fragment, needs a hidden package)
# fmt: off
ROWS: list[tuple[str, list[str], dict[str, str], int, str, bool]] = [
    # 1: an optional extra that is not installed
    ("inject-no-extra", ["inject", "-f", "examples/injected-deployment.yaml"], {}, 2,
     OPERATOR_HINT, True),
    ("operator-no-extra", ["operator", "-n", "apps"], {}, 2, OPERATOR_HINT, True),
    # 2: URL options: typed and allow-listed, refused in one line by every command
    *(
        (f"{cmd}-unknown-url-option", [cmd, *LOCK, "--redis", "redis://127.0.0.1:1/0?foo=bar",
                                       *extra], {}, 2, "unknown URL option 'foo'", False)
        for cmd, extra in (("status", []), ("retire", ["--yes"]), ("sidecar", ["--http", "off"]),
                           ("run", ["--", "true"]))
    ),
    ("ill-typed-url-option", ["status", *LOCK, "--redis", f"{DEAD}?socket_timeout=abc"], {}, 2,
     "socket_timeout='abc'", False),
    ("port-url-option", ["status", *LOCK, "--redis", f"{DEAD}?port=6380"], {}, 2,
     "URL option 'port' is not accepted", False),
    ("verify-off-url-option", ["status", *LOCK, "--redis", "rediss://127.0.0.1:1/0"
                               "?ssl_cert_reqs=none"], {}, 2, "'ssl_cert_reqs' is not accepted",
     False),
    ("url-option-from-env", ["status", *LOCK], {"REDLEASE_REDIS": f"{DEAD}?foo=1"}, 2,
     "unknown URL option 'foo'", False),
    # 3, 5: run's own flags and COMMAND checked before the lease (127 / 126, as `env`)
    ("run-try-and-timeout", ["run", *LOCK, "--redis", DEAD, "--try", "--timeout", "5", "--",
                             "true"], {}, 2, "not allowed with argument", False),
    ("run-bad-timeout", ["run", *LOCK, "--redis", DEAD, "--timeout", "soon", "--", "true"], {},
     2, "--timeout", False),
    ("run-not-found", ["run", *LOCK, "--redis", DEAD, "--", "/nonexistent"], {}, 127,
     "'/nonexistent': not found", False),
    ("run-not-on-path", ["run", *LOCK, "--redis", DEAD, "--", "no-such-command-x"], {}, 127,
     "'no-such-command-x': not found", False),
    # a bare name is looked up on PATH only (as `env` does), not in the current directory
    ("run-bare-name-not-on-path", ["run", *LOCK, "--redis", DEAD, "--", "pyproject.toml"], {},
     127, "'pyproject.toml': not found", False),
    ("run-not-executable-path", ["run", *LOCK, "--redis", DEAD, "--", "./pyproject.toml"], {},
     126, "'./pyproject.toml': not executable", False),
    # 10: durations: seconds or Kubernetes-style strings, one parser
    ("ttl-bad-duration", ["sidecar", *LOCK, "--redis", DEAD, "--ttl", "15x"], {}, 2, "--ttl",
     False),
    ("ttl-env-bad-duration", ["sidecar", *LOCK, "--redis", DEAD], {"REDLEASE_TTL": "1m30"}, 2,
     "REDLEASE_TTL (for --ttl)", False),
    ("operator-refresh-duration", ["operator", "-n", "apps", "--refresh", "fast"], {}, 2,
     "--refresh: not a duration", True),
    ("ttl-out-of-range", ["sidecar", *LOCK, "--redis", DEAD, "--ttl", "25h"], {}, 2,
     "--ttl: must be between 0.05 and 86400 seconds", False),
    ("validate-missing-file", ["validate", "-f", "/nonexistent.yaml"], {}, 1,
     "/nonexistent.yaml: -: file: No such file", True),
    ("validate-no-file", ["validate"], {}, 2, "-f/--filename", False),
    # 6: an unreachable Sentinel is named by what the user gave
    ("sentinel-unreachable", ["status", *LOCK, "--redis",
                              "redis+sentinel://127.0.0.1:1/mymaster"], {}, 1,
     "sentinel:mymaster via 127.0.0.1:1", False),
    # 7: Redis down: no "cleanup failed" on a plain failed acquire (checked for every row)
    # an outage is not "held": EX_UNAVAILABLE (69), for --try and --timeout alike
    ("run-try-dead-redis", ["run", *LOCK, "--redis", DEAD, "--try", "--", "true"], {}, 69,
     "Redis not reached", False),
    ("run-timeout-dead-redis", ["run", *LOCK, "--redis", DEAD, "--timeout", "1s", "--", "true"],
     {}, 69, "Redis not reached", False),
    # 8: no Kubernetes API: one line, exit 2, no retry loop
    ("operator-no-cluster", ["operator", "-n", "apps"],
     {"KUBECONFIG": "/nonexistent/kubeconfig"}, 2, "KUBECONFIG: no Kubernetes API", True),
    # 11: help and the demo
    ("demo-no-contenders", ["demo", "--contenders", "0"], {}, 2, "--contenders", False),
    ("wait-says-what", ["wait", "--state-file", "/nonexistent/x.json", "--timeout", "0.3"], {},
     1, "not leader within 0.3s (/nonexistent/x.json: directory /nonexistent does not exist",
     False),
    # 12: a bare HOST:PORT where a Redis URL goes, a misspelt flag, command or choice
    ("redis-host-port", ["status", *LOCK, "--redis", "127.0.0.1:6379"], {}, 2,
     "did you mean redis://127.0.0.1:6379/0?", False),
    ("redis-host-port-env", ["run", *LOCK, "--", "true"], {"REDLEASE_REDIS": "redis:6379"}, 2,
     "did you mean redis://redis:6379/0?", False),
    ("misspelt-flag", ["status", "--lok", "x", "--redis", DEAD], {}, 2,
     "--lok: did you mean --lock?", False),
    ("misspelt-flag-of-run", ["run", *LOCK, "--redis", DEAD, "--tyr", "--", "true"], {}, 2,
     "--tyr: did you mean --try?", False),
    ("misspelt-command", ["stauts"], {}, 2, "did you mean 'status'?", False),
    # run's --conflict-exit-code (an exit status) and --holders (1 to 64), flags and env alike
    ("run-conflict-code-range", ["run", *LOCK, "--redis", DEAD, "--conflict-exit-code", "256",
                                 "--", "true"], {}, 2, "exit status (0 to 255)", False),
    ("run-conflict-code-env", ["run", *LOCK, "--redis", DEAD, "--", "true"],
     {"REDLEASE_CONFLICT_EXIT_CODE": "-1"}, 2, "REDLEASE_CONFLICT_EXIT_CODE", False),
    ("run-holders-zero", ["run", *LOCK, "--redis", DEAD, "--holders", "0", "--", "true"], {}, 2,
     "--holders", False),
    ("run-holders-too-many", ["run", *LOCK, "--redis", DEAD, "--holders", "65", "--", "true"],
     {}, 2, "--holders", False),
    # a sidecar address: an http(s) URL or HOST:PORT, nothing else
    ("wait-http-no-host", ["wait", "--http", "http:///status"], {}, 2, "no host in", False),
    ("status-http-not-http", ["status", "--http", "ftp://h:1/status"], {}, 2,
     "not an http URL", False),
    ("misspelt-choice", ["run", *LOCK, "--redis", DEAD, "--log-level", "debgu", "--", "true"],
     {}, 2, "did you mean 'debug'?", False),
]
# fmt: on


@pytest.fixture(scope="module")
def hider(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("hide-extras")
    (where / "sitecustomize.py").write_text(HIDER)
    return where


@pytest.mark.parametrize("installed", ["full", "runtime-only"])
@pytest.mark.parametrize(
    ("argv", "environ", "code", "fragment", "needs_hidden"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_bad_input_answers_in_one_line(
    argv: list[str],
    environ: dict[str, str],
    code: int,
    fragment: str,
    needs_hidden: bool,
    installed: str,
    hider: Path,
) -> None:
    extra = dict(environ)
    if installed == "runtime-only":
        extra["REDLEASE_TEST_HIDE"] = ",".join(HIDDEN)
    if installed == "full" and fragment == OPERATOR_HINT:
        pytest.skip("the install hint is only for an installation without the extra")
    run_env = env(**extra)
    if installed == "runtime-only":
        run_env["PYTHONPATH"] = f"{hider}:{run_env['PYTHONPATH']}"
    if installed == "runtime-only" and needs_hidden:
        code, fragment = 2, OPERATOR_HINT
    proc = subprocess.run(
        [sys.executable, "-m", "redlease", *argv],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=ROOT,
        timeout=60,
    )
    err, out = proc.stderr, proc.stdout
    assert "Traceback" not in err + out, err
    assert proc.returncode == code, (proc.returncode, err)
    # log records (JSON) may come first; the user's answer is one plain line
    said = [line for line in err.splitlines() if line and not _progress(line)]
    assert len(said) <= 1, err
    assert fragment in (said[0] if said else out), err + out
    for noise in ("cleanup failed", "never retrieved", "localhost"):
        assert noise not in err + out, err + out


def _progress(line: str) -> bool:
    """A log record or a "waiting ..." note: not the answer."""
    return line.startswith(("{", "redlease: waiting ")) or (
        line.startswith("redlease: cannot read ") and "; retrying every " in line
    )


def test_the_hider_hides(hider: Path) -> None:
    """The runtime-only runs really lack the hidden packages, and only those."""
    code = "import importlib.util as u; print([u.find_spec(m) is None for m in ('kopf','yaml')])"
    environ = env(REDLEASE_TEST_HIDE=",".join(HIDDEN))
    environ["PYTHONPATH"] = f"{hider}:{environ['PYTHONPATH']}"
    probe = subprocess.run([sys.executable, "-c", f"import redis, aiohttp; {code}"],
                           capture_output=True, text=True, env=environ, timeout=60)  # fmt: skip
    assert "ModuleNotFoundError" in probe.stderr and "kopf" in probe.stderr


def test_refused_login_is_one_outage_line_not_a_cleanup_flood(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A wrong password: `run --try` answers in one line; the library's failed acquire logs no
    "cleanup failed" (nothing reached Redis, so there was nothing to undo)."""
    import logging

    import redis

    import redlease
    from redlease.devtools.localredis import RedisServer
    from redlease.errors import LockUnavailable

    with RedisServer(password="right") as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        proc = subprocess.run(
            [sys.executable, "-m", "redlease", "run", *LOCK, "--redis", url, "--try", "--", "true"],
            capture_output=True, text=True, env=env(REDLEASE_PASSWORD="wrong"), cwd=ROOT,
            timeout=60,
        )  # fmt: skip
        assert proc.returncode == 69 and "Traceback" not in proc.stderr
        assert "cleanup failed" not in proc.stderr and "Redis not reached" in proc.stderr
        client = redis.Redis(host="127.0.0.1", port=server.port, password="wrong")
        with caplog.at_level(logging.DEBUG, logger="redlease"), pytest.raises(LockUnavailable):
            redlease.Lock(client, "x", ttl=5).acquire(timeout=0)
        warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert not [r for r in warned if "cleanup failed" in r.getMessage()]
        client.close()


def test_sidecar_on_an_unreachable_sentinel_stops_cleanly(tmp_path: Path) -> None:
    from redlease.devtools.sidecarprocs import wait_until

    log = tmp_path / "stderr"
    url = "redis+sentinel://127.0.0.1:1/mymaster"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "redlease", "sidecar", *LOCK, "--redis", url, "--http", "off",
             "--state-dir", ""],
            stderr=out, env=env(), cwd=ROOT,
        )  # fmt: skip
        try:
            wait_until(lambda: "redis unavailable" in log.read_text(), timeout=60, step=0.1)
        finally:
            proc.terminate()
            proc.wait(30)
    text = log.read_text()
    # (the outage line names the Sentinel when redis-py answered first, else the time it took:
    # `status`'s row above checks the name; here: nothing the user did not give, no noise)
    for noise in ("localhost", "Traceback", "never retrieved", "unhandled exception",
                  "cleanup failed"):  # fmt: skip
        assert noise not in text, text
