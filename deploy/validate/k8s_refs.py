"""What a rendered Kubernetes layout refers to, and whether it is there.

    kubectl kustomize deploy/k8s/overlays/cpu | python3 k8s_refs.py -

Checks every pod template (Deployment, StatefulSet, LeaderWorkerSet leader and
worker): each ConfigMap, Secret and PersistentVolumeClaim it names (envFrom,
env valueFrom, volumes) is in the render; each `--router=HOST:PORT` (or
--target) argument whose HOST is a bare name is a Service of the render with that port; the
number of workers is one setting (the worker StatefulSet's replicas equal
MOE_NUM_WORKERS; a LeaderWorkerSet's router reads its group's size); every
router's pod has a preStop pause and a termination grace period above that
pause plus its --drain-timeout, so the kubelet never kills a draining router
with answers still owed. A Secret the
operator must create (EXTERNAL below, each documented in deploy/README.md)
may be absent. Exit 1 listing every problem.
"""

from __future__ import annotations

import re
import sys
from typing import Dict, Iterator, List, Tuple

import yaml

# Made by the operator, never shipped (they hold credentials): deploy/README.md
# says how to create it.
EXTERNAL = {("Secret", "moe-worker-token"), ("Secret", "moe-api-tls"),
            ("Secret", "moe-api-token")}

# The flags that dial another process (moe-worker --router, moe-cli --target).
HOST_PORT = re.compile(r"^--(?:router|target)=([a-z][a-z0-9-]*):(\d+)$")


def pod_templates(obj: dict) -> Iterator[Tuple[str, dict]]:
    kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
    spec = obj.get("spec", {})
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        yield f"{kind}/{name}", spec["template"]["spec"]
    elif kind == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        if "leaderTemplate" in lwt:
            yield f"{kind}/{name} leader", lwt["leaderTemplate"]["spec"]
        yield f"{kind}/{name} worker", lwt["workerTemplate"]["spec"]
    elif kind == "Pod":
        yield f"Pod/{name}", spec


def references(pod: dict) -> Iterator[Tuple[str, str, str]]:
    """(kind, name, where) of every object the pod spec names."""
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        cname = c.get("name")
        for ef in c.get("envFrom", []):
            if "configMapRef" in ef:
                yield "ConfigMap", ef["configMapRef"]["name"], f"{cname} envFrom"
            if "secretRef" in ef:
                yield "Secret", ef["secretRef"]["name"], f"{cname} envFrom"
        for e in c.get("env", []):
            vf = e.get("valueFrom", {})
            if "configMapKeyRef" in vf:
                yield "ConfigMap", vf["configMapKeyRef"]["name"], f"{cname} env {e['name']}"
            if "secretKeyRef" in vf:
                yield "Secret", vf["secretKeyRef"]["name"], f"{cname} env {e['name']}"
    for v in pod.get("volumes", []):
        if "configMap" in v:
            yield "ConfigMap", v["configMap"]["name"], f"volume {v['name']}"
        if "secret" in v:
            yield "Secret", v["secret"]["secretName"], f"volume {v['name']}"
        if "persistentVolumeClaim" in v:
            yield ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"],
                   f"volume {v['name']}")


# The router's --drain-timeout when the flag is not given (README, Draining).
DEFAULT_DRAIN_S = 30.0
# Kubernetes' grace period when the pod does not set one.
DEFAULT_GRACE_S = 30.0
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def seconds(duration: str) -> float:
    """An absl duration flag value ("30s", "500ms", "1m") in seconds."""
    m = DURATION.match(duration)
    if not m:
        raise ValueError(f"cannot read the duration {duration!r}")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]
    return float(m.group(1)) * scale


def drain_problems(where: str, pod: dict) -> List[str]:
    """A router container's drain fits in the pod's grace period."""
    problems = []
    grace = float(pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))
    for c in pod.get("containers", []):
        if c.get("command", [None])[0] != "moe-router":
            continue
        drain = DEFAULT_DRAIN_S
        for arg in c.get("args", []):
            if str(arg).startswith("--drain-timeout="):
                drain = seconds(str(arg).split("=", 1)[1])
        pre_stop = c.get("lifecycle", {}).get("preStop")
        pause = 0.0
        if not pre_stop:
            problems.append(f"{where}: router container {c.get('name')} has no preStop "
                            "pause: the Service may still send calls after SIGTERM")
        else:
            command = pre_stop.get("exec", {}).get("command", [])
            if len(command) == 2 and command[0] == "sleep":
                pause = float(command[1])
            elif "sleep" in pre_stop:
                pause = float(pre_stop["sleep"].get("seconds", 0))
        if grace <= pause + drain:
            problems.append(f"{where}: terminationGracePeriodSeconds {grace:g} is not above "
                            f"the preStop pause ({pause:g} s) plus --drain-timeout "
                            f"({drain:g} s): the kubelet would kill a draining router")
    return problems


def check(docs: List[dict]) -> List[str]:
    problems = []
    have = {(d.get("kind"), d.get("metadata", {}).get("name")) for d in docs}
    services: Dict[str, set] = {}
    for d in docs:
        if d.get("kind") == "Service":
            services[d["metadata"]["name"]] = {p["port"] for p in d["spec"].get("ports", [])}
    settings = {}
    for d in docs:
        if d.get("kind") == "ConfigMap":
            settings.update(d.get("data", {}))
    for d in docs:
        for where, pod in pod_templates(d):
            problems += drain_problems(where, pod)
            for kind, name, field in references(pod):
                if (kind, name) not in have and (kind, name) not in EXTERNAL:
                    problems.append(f"{where}: {field} names {kind} {name}, "
                                    "which the render does not contain")
            for c in pod.get("containers", []):
                for arg in c.get("args", []) + c.get("command", []):
                    m = HOST_PORT.match(str(arg))
                    if not m:
                        continue
                    host, port = m.group(1), int(m.group(2))
                    if host not in services:
                        problems.append(f"{where}: {arg} dials {host}, which is no "
                                        "Service of the render")
                    elif port not in services[host]:
                        problems.append(f"{where}: {arg} dials port {port} of Service "
                                        f"{host}, which serves {sorted(services[host])}")
    workers = settings.get("MOE_NUM_WORKERS")
    for d in docs:
        kind, name = d.get("kind"), d["metadata"]["name"]
        if kind == "StatefulSet" and name == "moe-worker":
            if str(d["spec"].get("replicas")) != str(workers):
                problems.append(f"StatefulSet/{name}: replicas {d['spec'].get('replicas')} "
                                f"but MOE_NUM_WORKERS is {workers}")
        if kind == "LeaderWorkerSet":
            # The group's size is the setting: the router must read it.
            leader = d["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
            args = [a for c in leader["containers"] for a in c.get("args", [])]
            if "--group-size=$(LWS_GROUP_SIZE)" not in args or any(
                    a.startswith("--num-workers") for a in args):
                problems.append(f"LeaderWorkerSet/{name}: the router must take its "
                                "worker count from the group (--group-size="
                                "$(LWS_GROUP_SIZE)), not --num-workers")
    return problems


def main(argv: List[str]) -> int:
    text = sys.stdin.read() if argv[1:] in ([], ["-"]) else open(argv[1]).read()
    docs = [d for d in yaml.safe_load_all(text) if d]
    problems = check(docs)
    for p in problems:
        print(f"  {p}")
    if problems:
        print(f"references: {len(problems)} problem(s)")
        return 1
    print(f"references: every ConfigMap, Secret, PVC and Service named by "
          f"{sum(1 for d in docs for _ in pod_templates(d))} pod template(s) is there "
          f"(external: {', '.join(n for _, n in sorted(EXTERNAL))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
