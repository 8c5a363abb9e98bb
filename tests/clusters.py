"""Real schedulers for the launcher tests, brought up as ../shared/spec/LAUNCH.md shows and stopped by pid.

Slurm: Debian's slurm-wlm (installed by `.ci/run`), one node, with a private slurm.conf, spool and log
folders under a temporary directory (SLURM_CONF points the client commands at it; free ports of its own so a
cluster the machine or another test session runs is left alone). munged is shared: started only if it is
not running, and stopped by the last test cluster to leave. Ray: `ray start --head` on 127.0.0.1 (free
ports of its own), stopped by killing its own processes only (`ray stop` stops every Ray on the machine, which
with pytest-xdist includes a verl run in the other worker).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

SLURM_CONF = """\
ClusterName=repro-test
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation={root}/spool/ctld
SlurmdSpoolDir={root}/spool/d
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
NodeName=localhost CPUs={cpus} RealMemory=20000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
# requeued jobs (tests/test_slurm_continuation.py): a requeued job may start again cred_expire + 1 s after
# its requeue (default 120 s; 10 s here still leaves a loaded machine time to launch a job with its
# credential), and the main scheduler looks at pending jobs every 3 s instead of 60 s
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=3
# one record per allocation, so `sacct -c -j <job>` lists each allocation of a requeued job
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
"""


def _stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _munged_running() -> bool:
    return subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0


MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


def _wait_munged_gone(seconds: float = 10) -> None:
    """munged outlives the `runuser` that started it by a moment, removing its socket as it exits: a
    cluster started in that moment would find it "running" and then lose it (the next module's slurmd
    failed to register)."""
    deadline = time.monotonic() + seconds
    while _munged_running() and time.monotonic() < deadline:
        time.sleep(0.1)


MUNGE_USERS = Path("/run/munge/repro-test-clusters.lock")  # every live test cluster holds it shared
MUNGE_STARTED = Path("/run/munge/repro-test-munged.pid")  # the munged a test cluster started, if one did


def _start_munge() -> subprocess.Popen | None:
    if _munged_running() and MUNGE_SOCKET.exists():
        return None  # someone else's munged (a Debian service, another test session): use it, leave it running
    _wait_munged_gone()
    for folder in ("/etc/munge", "/run/munge", "/var/lib/munge", "/var/log/munge"):
        Path(folder).mkdir(parents=True, exist_ok=True)
    if not Path("/etc/munge/munge.key").exists():
        subprocess.run(["mungekey", "-c"], check=True)
    subprocess.run(["chown", "-R", "munge:munge", "/etc/munge", "/run/munge", "/var/lib/munge", "/var/log/munge"])
    os.chmod("/etc/munge/munge.key", 0o400)
    proc = subprocess.Popen(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--foreground", "--force"])
    for _ in range(50):
        if MUNGE_SOCKET.exists():
            break
        time.sleep(0.1)
    return proc


@contextlib.contextmanager
def _munge_guard() -> Iterator[None]:
    """Starting, joining and leaving the shared munged, one test session at a time."""
    MUNGE_USERS.parent.mkdir(parents=True, exist_ok=True)
    with open(MUNGE_USERS.with_suffix(".guard"), "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _munge() -> Iterator[None]:
    """munged for a test cluster. Several test sessions may run Slurm clusters at once (each on ports of its
    own), and they share one munged: the one running, or one a cluster starts. The last cluster to leave
    stops a munged that a test cluster started (its pid is in MUNGE_STARTED), so none is left behind and
    none is stopped under another session's cluster."""
    with _munge_guard():
        proc = _start_munge()
        if proc is not None:
            MUNGE_STARTED.write_text(f"{proc.pid}\n")
        user = open(MUNGE_USERS, "a")  # noqa: SIM115 - held for the cluster's life
        fcntl.flock(user, fcntl.LOCK_SH)
    try:
        yield
    finally:
        with _munge_guard():
            user.close()  # drops this cluster's shared lock
            with open(MUNGE_USERS, "a") as probe:
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other cluster uses munged now
                except BlockingIOError:
                    return
            if proc is not None:
                _stop(proc)
            elif MUNGE_STARTED.exists():  # started by a session that left first
                with contextlib.suppress(ValueError, ProcessLookupError):
                    os.kill(int(MUNGE_STARTED.read_text()), signal.SIGTERM)
            if proc is not None or MUNGE_STARTED.exists():
                MUNGE_STARTED.unlink(missing_ok=True)
                _wait_munged_gone()


@contextlib.contextmanager
def slurm_cluster(root: Path) -> Iterator[dict[str, str]]:
    """A one-node Slurm cluster; yields the environment (SLURM_CONF) its client commands need."""
    missing = [cmd for cmd in ("slurmctld", "slurmd", "sbatch", "munged") if shutil.which(cmd) is None]
    if missing:
        raise RuntimeError(
            f"{', '.join(missing)} not installed: `apt-get install -y slurm-wlm munge` (.ci/run does it)"
        )
    for sub in ("spool/ctld", "spool/d", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    ctld_port, slurmd_port = _free_ports(2)  # another session's cluster may be up: ports of our own
    conf.write_text(
        SLURM_CONF.format(root=root, cpus=os.cpu_count() or 1, ctld_port=ctld_port, slurmd_port=slurmd_port)
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started: list[subprocess.Popen] = []
    with _munge(), _daemons(root, conf, env, started):
        yield {"SLURM_CONF": str(conf)}


@contextlib.contextmanager
def _daemons(root: Path, conf: Path, env: dict[str, str], started: list[subprocess.Popen]) -> Iterator[None]:
    """slurmctld and slurmd of one test cluster, up until the node is idle; on the way out, its jobs cancelled
    and the daemons stopped."""
    try:
        for daemon in ("slurmctld", "slurmd"):
            log = open(root / "log" / f"{daemon}.stdout", "wb")  # noqa: SIM115 - lives as long as the daemon
            started.append(subprocess.Popen([daemon, "-D", "-f", str(conf)], stdout=log, stderr=log, env=env))
            time.sleep(0.5)
        deadline = time.monotonic() + 60
        while True:
            dead = [proc.args[0] for proc in started if proc.poll() is not None]
            if dead:  # e.g. a leftover daemon of a killed test run holds the port
                raise RuntimeError(f"{', '.join(dead)} exited at start; see {root / 'log'}")
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env).stdout
            if out.strip() in ("idle", "mix", "alloc"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"slurm node never became idle (sinfo: {out.strip()!r}); see {root / 'log'}")
            time.sleep(0.5)
        yield
    finally:
        # jobs outlive slurmd under proctrack/linuxproc: cancel ours first, so no test leaves one running
        if started and started[0].poll() is None:
            subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                queue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout
                if not queue.strip():
                    break
                time.sleep(0.5)
        for proc in reversed(started):
            _stop(proc)


AGENT_PORT_FLAGS = (
    "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
    "--metrics-export-port", "--ray-client-server-port", "--object-manager-port", "--node-manager-port",
)  # fmt: skip


def _free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now: bound together (so distinct), then released for Ray to take."""
    import socket

    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@contextlib.contextmanager
def ray_cluster(temp_dir: Path) -> Iterator[str]:
    """A Ray head on 127.0.0.1 with the dashboard (Jobs API) on a free port; yields the Jobs API address."""
    ray = Path(sys.executable).parent / "ray"
    temp_dir.mkdir(parents=True, exist_ok=True)
    # Ray 2.60 turns token auth on for `ray start` once ~/.ray/auth_token exists, which any local
    # `ray.init()` (a verl run) creates; the Jobs API client here then lacks the token. This test cluster
    # lives on 127.0.0.1 only: run it without auth, explicitly.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    # the head's and the dashboard's ports too are free ones: another test session may run its own cluster
    head, dashboard, *agents = _free_ports(2 + len(AGENT_PORT_FLAGS))
    start = [
        str(ray), "start", "--head", f"--port={head}", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}", "--num-cpus=2", "--include-dashboard=true", "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]  # fmt: skip
    # Every other port Ray would take by default (the job agent's 52365 among them) is a free one: a verl run
    # in another xdist worker starts its own local Ray with those defaults, and the second agent to bind
    # loses; this cluster's Jobs API then answers "No available agent to submit job" (seen in the suite).
    ports = dict(zip(AGENT_PORT_FLAGS, agents, strict=True))
    start += [f"{flag}={port}" for flag, port in ports.items()]
    result = subprocess.run(start, capture_output=True, text=True, env=env, timeout=180)
    if result.returncode != 0:
        raise RuntimeError(f"ray start failed: {result.stderr[-2000:]}")
    address = f"http://127.0.0.1:{dashboard}"
    try:
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + 120
        while True:  # the dashboard's Jobs API comes up a few seconds after `ray start` returns
            try:
                JobSubmissionClient(address).list_jobs()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        yield address
    finally:
        _stop_ray_cluster(temp_dir, port=head)


def _stop_ray_cluster(temp_dir: Path, port: int) -> None:
    """SIGKILL this cluster's processes and their children: those naming its temp dir (GCS, raylet, dashboard,
    monitors) or its GCS port (the client server), so that a concurrent local Ray is left alone."""
    marks = (str(temp_dir), f":{port} ")
    roots = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or []) + " "
        if proc.pid != os.getpid() and any(mark in line for mark in marks):
            roots.append(proc)
    victims = {p.pid: p for root in roots for p in [root, *_children(root)]}
    for proc in victims.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(list(victims.values()), timeout=30)


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []
