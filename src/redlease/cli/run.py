"""``redlease run --lock NAME --redis URL -- COMMAND``: its flags and the :class:`RunConfig` they
make (exit statuses and the config in :mod:`redlease.cli.runspec`); :mod:`redlease.cli.runner`
runs it. COMMAND is checked before anything connects (127 / 126, as `env`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from redlease.cli import flags
from redlease.cli.command import Command, Flag
from redlease.cli.login import sidecar_login, this_pod
from redlease.cli.runspec import NOT_ACQUIRED, RunConfig, command_problem
from redlease.core.durations import positive_duration
from redlease.errors import ConfigError
from redlease.kube import sidecar_args as sa

OWN = (
    Flag(
        ("--grace",),
        "SIGTERM to SIGKILL (default: half the gap between renew deadline and TTL)",
        parse=positive_duration,
        metavar="DURATION",
    ),
    Flag(
        ("--timeout",),
        "give up after waiting this long for the lease: exit 75, COMMAND not run "
        "(default: wait on)",
        parse=positive_duration,
        metavar="DURATION",
        group="give-up",
    ),
    Flag(
        ("--try",),
        "skip at once if the lease is held: exit 75, COMMAND not run (flock -n)",
        kind="switch",
        dest="try_once",
        group="give-up",
    ),
    Flag(
        ("--conflict-exit-code",),
        f"exit status when --try or --timeout finds the lease held by another (flock -E; 0 "
        f"lets a CronJob skip quietly) (default: {NOT_ACQUIRED})",
        NOT_ACQUIRED,
        flags.exit_status,
        metavar="N",
    ),
    Flag(
        (sa.HOLDERS,),
        "N may run at once, each holding one slot of a counting semaphore over the lock "
        "(consul lock -n; 1 to 64; with --lock-ref, spec.holders decides)",
        1,
        flags.count,
        metavar="N",
    ),
    Flag(
        ("--keep-credentials-env",),
        "pass REDLEASE_PASSWORD/USERNAME/REDIS on to COMMAND (default: removed)",
        kind="switch",
    ),
)


def _command_words(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS")


def run_config(args: argparse.Namespace, command: tuple[str, ...]) -> RunConfig:
    """``redlease run``'s configuration from its parsed flags, its pod and its API login."""
    from redlease.sidecar.config import check_holders

    pod = this_pod()
    holder = flags.identity(args)
    login = sidecar_login(args.kube_api, pod, holder)
    ref = flags.lock_ref(args, pod.namespace)
    election = None
    if ref is None:
        election = flags.election_config(args)
        holders = check_holders(args.holders, election.keys, sa.HOLDERS)
        election = dataclasses.replace(election, holders=holders)
    else:  # the DistributedLock's spec.holders decides; the flag is checked all the same
        check_holders(args.holders, (), sa.HOLDERS)
    return RunConfig(
        identity=holder,
        election=election,
        command=command,
        grace=args.grace,
        lock_ref=ref,
        kube=login,
        keep_credentials=args.keep_credentials_env,
        wait=0.0 if args.try_once else args.timeout,
        conflict_exit=args.conflict_exit_code,
    )


def main(args: argparse.Namespace) -> int:
    from redlease.cli import logs

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("COMMAND", "give the command to run after --")
    problem = command_problem(tuple(cmd), os.environ.get("PATH"))
    if problem is not None:
        sys.stderr.write(f"redlease: error: COMMAND {problem[1]}\n")
        return problem[0]
    config = run_config(args, tuple(cmd))
    logs.configure(args.log_level, args.log_format)
    from redlease.cli.runner import run_command

    return run_command(config)


COMMAND = Command(
    name="run",
    summary="run COMMAND only while holding the lease",
    description="Run COMMAND only while holding the lease; stop it (SIGTERM, then SIGKILL) when "
    "the lease is lost. Exit status: COMMAND's; 75 (or --conflict-exit-code) when --try or "
    "--timeout found the lease held by another (COMMAND not run); 69 when Redis could not be "
    "reached or no quorum answered (COMMAND not run); 76 when the lease was lost while COMMAND "
    "ran; 127 / 126 when COMMAND is not found / not executable (checked before the lease is "
    "taken); 2 for bad input.",
    example="redlease run --lock nightly --redis redis://redis:6379/0 --try -- ./export.sh",
    flags=(*flags.CONNECTION, *flags.ELECTION, *flags.LOCK_REF, *OWN, *flags.LOG),
    run=main,
    credentials=True,
    positionals=_command_words,
    exit_at_once=True,
)
