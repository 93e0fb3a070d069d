"""Runs a rendered Kubernetes layout as a kubelet and kube-proxy would, with
the service's real binaries as the containers, on loopback addresses.

    kubectl kustomize deploy/k8s/overlays/cpu > /tmp/cpu.yaml
    python3 kube_sim.py --render /tmp/cpu.yaml --bin-dir build --seconds 60

What it applies with Kubernetes' semantics:
- pods: every Deployment and StatefulSet replica is a pod with its own
  address (127.0.1.N: a pod's 0.0.0.0 is its own address, so listen
  addresses 0.0.0.0:P become POD_IP:P); env from `env` (value, fieldRef
  status.podIP / metadata.name) and `envFrom` ConfigMaps, $(VAR) expanded in
  command and args as the kubelet does; volume mounts are host directories
  (the model claim holds a small Mixtral checkpoint, the worker token Secret
  a random token), reached by rewriting the mount path in arguments.
- probes: gRPC startup, readiness and liveness probes with their port,
  service, periodSeconds, timeoutSeconds, failureThreshold and
  initialDelaySeconds (Kubernetes defaults where absent); liveness and
  readiness wait for the startup probe; a failed startup or liveness probe
  kills the container, and restartPolicy Always restarts any container that
  ends, with CrashLoopBackOff's doubling back-off (from 10 s here: 1 s).
- Services: each ClusterIP Service gets an address (127.0.2.N) and a TCP
  proxy per port that forwards only to Ready endpoints (to every endpoint
  with publishNotReadyAddresses); a name in an argument (`--router=NAME:P`)
  resolves to the Service's address, as cluster DNS would.
Not applied: resources, securityContext, the image (the build's binaries run
instead), NetworkPolicy.

The scenario: everything starts; within --ready-s every pod must be Ready and
a forward through the `moe-router` Service answered; then one worker is
killed (SIGKILL) and must be restarted by its pod and the group serve again,
through --seconds of run time, with no restart of anything else. Probe
results are checked against the documented meaning on the way. Exit 0 on
success, 1 with the reason and every pod's log tail otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import grpc  # noqa: E402

from moe_serve._stubs import health_pb2, health_pb2_grpc  # noqa: E402

SERVING = health_pb2.HealthCheckResponse.SERVING
BACKOFF_START_S = 1.0  # the kubelet's 10 s, shortened for a test
BACKOFF_MAX_S = 8.0


def log(msg: str) -> None:
    print(f"[kube-sim {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def probe_grpc(address: str, service: str, timeout_s: float) -> bool:
    """A gRPC probe: success iff the health service answers SERVING."""
    with grpc.insecure_channel(address) as ch:
        try:
            r = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
            return r.status == SERVING
        except grpc.RpcError:
            return False


class Probe:
    def __init__(self, spec: Optional[dict], ip: str, kind: str):
        self.spec = spec or {}
        self.kind = kind
        g = self.spec.get("grpc", {})
        self.address = f"{ip}:{g.get('port')}"
        self.service = g.get("service", "")
        self.period = float(self.spec.get("periodSeconds", 10))
        self.timeout = float(self.spec.get("timeoutSeconds", 1))
        self.failures_allowed = int(self.spec.get("failureThreshold", 3))
        self.delay = float(self.spec.get("initialDelaySeconds", 0))
        if self.spec and "grpc" not in self.spec:
            raise ValueError(f"{kind} probe: only grpc probes are simulated")


class Container:
    """One pod's container: its process, probes and restarts."""

    def __init__(self, pod: "Pod", spec: dict, argv: List[str], env: Dict[str, str]):
        self.pod = pod
        self.name = spec["name"]
        self.argv = argv
        self.env = env
        self.startup = Probe(spec.get("startupProbe"), pod.ip, "startup")
        self.readiness = Probe(spec.get("readinessProbe"), pod.ip, "readiness")
        self.liveness = Probe(spec.get("livenessProbe"), pod.ip, "liveness")
        self.proc: Optional[subprocess.Popen] = None
        self.restarts = 0
        self.ready = False
        self.started = False
        self.events: List[str] = []
        self.log_path = os.path.join(pod.sim.tmp, f"{pod.name}.log")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._thread.join(timeout=10)

    def event(self, what: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {what}")
        log(f"{self.pod.name}: {what}")

    def _spawn(self) -> None:
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=logf,
                                     stderr=subprocess.STDOUT)
        logf.close()
        self.started = not self.startup.spec
        self.ready = False

    def _kill(self, why: str) -> None:
        self.event(f"killing: {why}")
        self.proc.kill()
        self.proc.wait()

    def _run(self) -> None:
        backoff = BACKOFF_START_S
        self._spawn()
        t0 = time.time()
        fails = {"startup": 0, "readiness": 0, "liveness": 0}
        next_at = {"startup": t0 + self.startup.delay,
                   "readiness": t0 + self.readiness.delay,
                   "liveness": t0 + self.liveness.delay}
        while not self._stop.is_set():
            if self.proc.poll() is not None:
                self.ready = False
                self.event(f"exited with {self.proc.returncode}; restart in {backoff:.0f} s")
                if self._stop.wait(backoff):
                    return
                backoff = min(2 * backoff, BACKOFF_MAX_S)
                self.restarts += 1
                self._spawn()
                t0 = time.time()
                fails = {k: 0 for k in fails}
                next_at = {"startup": t0 + self.startup.delay,
                           "readiness": t0 + self.readiness.delay,
                           "liveness": t0 + self.liveness.delay}
                continue
            now = time.time()
            if not self.started:
                if now >= next_at["startup"]:
                    next_at["startup"] = now + self.startup.period
                    if probe_grpc(self.startup.address, self.startup.service,
                                  self.startup.timeout):
                        self.started = True
                        self.event("startup probe passed")
                        next_at["readiness"] = next_at["liveness"] = now
                    else:
                        fails["startup"] += 1
                        if fails["startup"] >= self.startup.failures_allowed:
                            self._kill("startup probe failed "
                                       f"{fails['startup']} times")
                            continue
            else:
                if self.liveness.spec and now >= next_at["liveness"]:
                    next_at["liveness"] = now + self.liveness.period
                    if probe_grpc(self.liveness.address, self.liveness.service,
                                  self.liveness.timeout):
                        fails["liveness"] = 0
                    else:
                        fails["liveness"] += 1
                        if fails["liveness"] >= self.liveness.failures_allowed:
                            self._kill(f"liveness probe failed {fails['liveness']} times")
                            continue
                if now >= next_at["readiness"]:
                    next_at["readiness"] = now + self.readiness.period
                    ok = (probe_grpc(self.readiness.address, self.readiness.service,
                                     self.readiness.timeout)
                          if self.readiness.spec else True)
                    if ok:
                        fails["readiness"] = 0
                        if not self.ready:
                            self.ready = True
                            backoff = BACKOFF_START_S
                            self.event("Ready")
                    else:
                        fails["readiness"] += 1
                        if self.ready and fails["readiness"] >= self.readiness.failures_allowed:
                            self.ready = False
                            self.event("not Ready")
            self._stop.wait(0.1)


class Pod:
    def __init__(self, sim: "Sim", name: str, ip: str, labels: Dict[str, str],
                 spec: dict):
        self.sim = sim
        self.name = name
        self.ip = ip
        self.labels = labels
        self.spec = spec
        self.ports: Dict[str, int] = {}
        self.containers: List[Container] = []
        for c in spec["containers"]:
            for p in c.get("ports", []):
                if "name" in p:
                    self.ports[p["name"]] = int(p["containerPort"])
            env = sim.container_env(self, c)
            argv = [sim.binary(c["command"][0])] + [
                sim.rewrite_arg(self, c, expand(a, env))
                for a in c["command"][1:] + c.get("args", [])]
            self.containers.append(Container(self, c, argv, {**os.environ, **env}))

    @property
    def ready(self) -> bool:
        return all(c.ready for c in self.containers)


def expand(text: str, env: Dict[str, str]) -> str:
    """$(VAR) as the kubelet expands it: known variables only."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), str(text))


class Proxy:
    """A Service port: forwards each connection to one of its endpoints."""

    def __init__(self, sim: "Sim", svc: dict, port: dict, ip: str):
        self.sim = sim
        self.svc = svc
        self.name = svc["metadata"]["name"]
        self.port = int(port["port"])
        self.target = port.get("targetPort", port["port"])
        self.not_ready_too = bool(svc["spec"].get("publishNotReadyAddresses"))
        self.selector = svc["spec"].get("selector", {})
        self.listener = socket.create_server((ip, self.port))
        self.turn = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def endpoints(self) -> List[str]:
        out = []
        for pod in self.sim.pods:
            if all(pod.labels.get(k) == v for k, v in self.selector.items()):
                if pod.ready or self.not_ready_too:
                    port = (pod.ports.get(self.target) if isinstance(self.target, str)
                            else int(self.target))
                    if port:
                        out.append(f"{pod.ip}:{port}")
        return out

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            eps = self.endpoints()
            if not eps:
                conn.close()  # no endpoint: kube-proxy rejects
                continue
            self.turn += 1
            host, port = eps[self.turn % len(eps)].rsplit(":", 1)
            try:
                up = socket.create_connection((host, int(port)), timeout=2)
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Sim:
    def __init__(self, docs: List[dict], bin_dir: str, tmp: str):
        self.docs = docs
        self.bin_dir = bin_dir
        self.tmp = tmp
        self.pods: List[Pod] = []
        self.proxies: List[Proxy] = []
        self.service_ip: Dict[str, str] = {}
        self.config: Dict[str, Dict[str, str]] = {
            d["metadata"]["name"]: {k: str(v) for k, v in d.get("data", {}).items()}
            for d in docs if d["kind"] == "ConfigMap"}
        self.volumes = self._make_volumes()
        for i, svc in enumerate(d for d in docs if d["kind"] == "Service"):
            if svc["spec"].get("clusterIP") != "None":
                self.service_ip[svc["metadata"]["name"]] = f"127.0.2.{i + 1}"

    def _make_volumes(self) -> Dict[str, str]:
        """Host directories for claims and Secrets, filled as an operator
        would: the model claim with a checkpoint at MOE_MODEL, the worker
        token Secret with a random token."""
        out = {}
        for d in self.docs:
            if d["kind"] == "PersistentVolumeClaim":
                path = os.path.join(self.tmp, "pvc-" + d["metadata"]["name"])
                os.makedirs(path, exist_ok=True)
                out[("pvc", d["metadata"]["name"])] = path
        token_dir = os.path.join(self.tmp, "secret-moe-worker-token")
        os.makedirs(token_dir, exist_ok=True)
        with open(os.path.join(token_dir, "token"), "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        out[("secret", "moe-worker-token")] = token_dir
        return out

    def binary(self, name: str) -> str:
        sub = {"moe-router": "server", "moe-worker": "worker"}[name]
        for p in (os.path.join(self.bin_dir, sub, name), os.path.join(self.bin_dir, name)):
            if os.access(p, os.X_OK):
                return p
        raise FileNotFoundError(f"{name} under {self.bin_dir}")

    def container_env(self, pod: Pod, c: dict) -> Dict[str, str]:
        env: Dict[str, str] = {}
        for ef in c.get("envFrom", []):
            name = ef.get("configMapRef", {}).get("name")
            if name is not None:
                if name not in self.config:
                    raise KeyError(f"{pod.name}: envFrom ConfigMap {name} is not in the render")
                env.update(self.config[name])
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            if field == "status.podIP":
                env[e["name"]] = pod.ip
            elif field == "metadata.name":
                env[e["name"]] = pod.name
            ref = e.get("valueFrom", {}).get("configMapKeyRef")
            if ref:
                env[e["name"]] = self.config[ref["name"]][ref["key"]]
        return env

    def rewrite_arg(self, pod: Pod, c: dict, arg: str) -> str:
        # The pod's network namespace: 0.0.0.0 is the pod's own address.
        arg = arg.replace("=0.0.0.0:", f"={pod.ip}:")
        # Cluster DNS: a Service name dialled by --router/--target.
        m = re.match(r"^(--(?:router|target)=)([a-z][a-z0-9-]*):(\d+)$", arg)
        if m and m.group(2) in self.service_ip:
            arg = f"{m.group(1)}{self.service_ip[m.group(2)]}:{m.group(3)}"
        # Volume mounts: the mount path is the volume's host directory.
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        for vm in c.get("volumeMounts", []):
            v = volumes[vm["name"]]
            host = None
            if "persistentVolumeClaim" in v:
                host = self.volumes[("pvc", v["persistentVolumeClaim"]["claimName"])]
            elif "secret" in v:
                host = self.volumes.get(("secret", v["secret"]["secretName"]))
            if host and vm["mountPath"] in arg:
                arg = arg.replace(vm["mountPath"], host)
        return arg

    def make_pods(self) -> None:
        n = 0
        for d in self.docs:
            if d["kind"] not in ("Deployment", "StatefulSet"):
                continue
            name = d["metadata"]["name"]
            tmpl = d["spec"]["template"]
            for r in range(int(d["spec"].get("replicas", 1))):
                n += 1
                pod_name = f"{name}-{r}" if d["kind"] == "StatefulSet" else f"{name}-pod"
                self.pods.append(Pod(self, pod_name, f"127.0.1.{n}",
                                     tmpl["metadata"].get("labels", {}), tmpl["spec"]))

    def start(self) -> None:
        for d in self.docs:
            if d["kind"] == "Service" and d["metadata"]["name"] in self.service_ip:
                for port in d["spec"].get("ports", []):
                    self.proxies.append(
                        Proxy(self, d, port, self.service_ip[d["metadata"]["name"]]))
        for pod in self.pods:
            for c in pod.containers:
                c.start()

    def stop(self) -> None:
        for pod in self.pods:
            for c in pod.containers:
                c.stop()
        for p in self.proxies:
            p.listener.close()

    def pod(self, name: str) -> Pod:
        return next(p for p in self.pods if p.name == name)

    def logs(self) -> str:
        out = []
        for pod in self.pods:
            for c in pod.containers:
                out.append(f"--- {pod.name} ({c.restarts} restarts; events: "
                           f"{'; '.join(c.events[-8:])})")
                try:
                    with open(c.log_path, errors="replace") as f:
                        out.append("".join(f.readlines()[-12:]))
                except OSError:
                    pass
        return "\n".join(out)


def wait_for(cond, seconds: float, what: str) -> None:
    end = time.time() + seconds
    while time.time() < end:
        if cond():
            return
        time.sleep(0.25)
    raise AssertionError(f"not within {seconds:.0f} s: {what}")


def forward(cli: str, target: str, layer: int) -> subprocess.CompletedProcess:
    return subprocess.run([cli, "forward", "--target", target, "--layer", str(layer),
                           "--random", "5", "--timeout-ms", "10000"],
                          capture_output=True, text=True, timeout=30)


def scrape(address: str) -> set:
    """The metric names a /metrics endpoint exports (samples' names with a
    histogram's _bucket/_sum/_count too)."""
    import urllib.request
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        text = r.read().decode()
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names


def monitored_metrics() -> set:
    """Every moe_*/process_* metric the shipped dashboard and alert rules
    query."""
    names = set()
    for f in ("alerts.yaml", "grafana-dashboard.json"):
        with open(os.path.join(REPO, "deploy", "monitoring", f)) as fh:
            names |= set(re.findall(r"\b((?:moe|process)_[a-z0-9_]+)", fh.read()))
    return names


def run(args) -> int:
    with open(args.render) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    tmp = tempfile.mkdtemp(prefix="kube-sim-")
    sim = Sim(docs, args.bin_dir, tmp)
    # The operator's model: a small checkpoint where MOE_MODEL points.
    model = sim.config["moe-settings"]["MOE_MODEL"]
    claim = next(v for k, v in sim.volumes.items() if k[0] == "pvc")
    ckpt = os.path.join(claim, os.path.relpath(model, "/models"))
    subprocess.run([sys.executable, os.path.join(REPO, "examples", "remote_model",
                                                 "make_checkpoint.py"), "mixtral", ckpt],
                   check=True, stdout=subprocess.DEVNULL)
    sim.make_pods()
    workers = [p for p in sim.pods if p.name.startswith("moe-worker")]
    router = next(p for p in sim.pods if p.name.startswith("moe-router"))
    want = int(sim.config["moe-settings"]["MOE_NUM_WORKERS"])
    cli = os.path.join(args.bin_dir, "client", "moe-cli")
    if not os.access(cli, os.X_OK):
        cli = os.path.join(args.bin_dir, "moe-cli")
    target = f"{sim.service_ip['moe-router']}:50051"
    started = time.time()
    try:
        assert len(workers) == want, f"{len(workers)} worker pods, MOE_NUM_WORKERS {want}"
        sim.start()
        log(f"{len(sim.pods)} pods, {len(sim.proxies)} service ports; "
            f"public Service at {target}")
        health = f"{router.ip}:50052"
        # Liveness answers while the router waits for its workers.
        wait_for(lambda: probe_grpc(health, "liveness", 1), 20,
                 "the router's liveness probe SERVING")
        wait_for(lambda: all(p.ready for p in sim.pods), args.ready_s,
                 "every pod Ready")
        log("every pod Ready")
        r = forward(cli, target, 0)
        assert r.returncode == 0, f"forward through the Service failed: {r.stdout}{r.stderr}"
        log(f"forward through Service moe-router: {r.stdout.strip().splitlines()[0]}")
        assert probe_grpc(health, "full-capacity", 1), "full-capacity not SERVING"
        # What the dashboard and alert rules query is exported, counters at
        # zero included (no refusal, rebalance or failed step happened).
        exported = scrape(f"{router.ip}:9090") | scrape(f"{workers[0].ip}:9091")
        missing = sorted(monitored_metrics() - exported)
        assert not missing, f"dashboard/alerts query metrics nobody exports: {missing}"
        log(f"metrics: all {len(monitored_metrics())} the dashboard and alerts use "
            "are exported")
        # A worker crashes: its pod restarts it, nothing else restarts.
        victim = workers[-1].containers[0]
        log(f"SIGKILL to {workers[-1].name} (pid {victim.proc.pid})")
        os.kill(victim.proc.pid, signal.SIGKILL)
        wait_for(lambda: victim.restarts == 1 and workers[-1].ready, 60,
                 f"{workers[-1].name} restarted and Ready again")
        wait_for(lambda: forward(cli, target, 1).returncode == 0, 30,
                 "a forward answered after the worker came back")
        log("forward answered after the restart")
        while time.time() - started < args.seconds:
            assert router.containers[0].proc.poll() is None, "the router exited"
            time.sleep(1)
        r = forward(cli, target, 2)
        assert r.returncode == 0, f"final forward failed: {r.stdout}{r.stderr}"
        assert probe_grpc(health, "liveness", 1) and probe_grpc(health, "", 1)
        restarts = {p.name: sum(c.restarts for c in p.containers) for p in sim.pods}
        expected = {p.name: (1 if p is workers[-1] else 0) for p in sim.pods}
        assert restarts == expected, f"restarts {restarts}, expected {expected}"
        log(f"PASS: {time.time() - started:.0f} s, restarts {restarts}")
        return 0
    except (AssertionError, KeyError, FileNotFoundError) as e:
        log(f"FAIL: {e}")
        print(sim.logs())
        return 1
    finally:
        sim.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--render", required=True, help="kubectl kustomize output")
    ap.add_argument("--bin-dir", required=True, help="build dir or folder of binaries")
    ap.add_argument("--seconds", type=float, default=60, help="whole run, at least")
    ap.add_argument("--ready-s", type=float, default=90,
                    help="time for every pod to turn Ready")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
