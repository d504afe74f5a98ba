#!/usr/bin/env python3
"""Turns the kustomize output of deploy/kubernetes into what `podman kube play` runs
(scripts/deploy-smoke.sh).

  kubepods.py ALL.YAML OUTDIR --sink-address IP [--sender-address IP] [--job-subnet A.B.C]

Writes, from the rendered manifests and nothing else:
  OUTDIR/secret.yaml   the Secret (kustomize's ringblast-control-<hash>), unchanged;
  OUTDIR/sink.yaml     the DaemonSet's pod template as a Pod: kube play takes Pods and
                       Deployments, not DaemonSets (name, namespace and labels from the
                       DaemonSet and its template, spec = the template's spec, unchanged);
  OUTDIR/sender.yaml   the sender Deployment, with one addition: a hostAliases entry that maps
                       the headless Service's name to the sink node's address, which is what the
                       cluster DNS would answer (podman models no Services).
  OUTDIR/job-<i>.yaml  (with an Indexed Job, in place of the Deployment) pod <job>-<i> for each
                       index i < completions, as the Job controller makes them: labels
                       job-name and batch.kubernetes.io/job-completion-index, the annotation
                       batch.kubernetes.io/job-completion-index and env JOB_COMPLETION_INDEX=<i>
                       added, the template's spec otherwise unchanged (restartPolicy Never), the
                       same hostAliases entry. They are on the pod network: pod i's address is
                       A.B.C.(10+i) (given to podman with --ip), listed in OUTDIR/job-pods.txt
                       as "NAME ADDRESS FILE" lines.
In every pod spec the downward-API env is resolved and $(VAR) in args expanded, as the kubelet
does (see kubelet_env; status.podIP is the node address for a hostNetwork pod, the address
given to podman otherwise; a configMapKeyRef is the rendered ConfigMap's value), containerPorts on the host network are dropped and probes get port numbers
instead of names (see host_network_ports; on the pod network only
the ports without hostPort are dropped); args, env, security context, volumes stay as rendered.
The pod-level seccompProfile (Localhost) is also given as the annotation podman reads (see
seccomp_annotation). Prints what it left out (Namespace, Service, PodMonitor: checked by schema only;
the Job object itself: podman 4.3 plays no Jobs).
"""
import argparse
import copy
import os
import re
import sys

import yaml


def host_network_ports(spec):
    """podman 4.x publishes every containerPort, which it refuses on the host network ("PortMappings
    can only be used with Bridge or slirp4netns networking"). On the host network a containerPort
    only names the node's port, so it is dropped, and probes that name it get its number. On the
    pod network podman 4.x publishes a containerPort without hostPort on the node's port of the
    same number (two such pods on one node clash), where Kubernetes publishes nothing: there the
    ports without hostPort are dropped, as documentation only."""
    for c in spec["containers"]:
        ports = c.get("ports", [])
        numbers = {p["name"]: p["containerPort"] for p in ports if "name" in p and p.get("protocol", "TCP") == "TCP"}
        kept = [] if spec.get("hostNetwork") else [p for p in ports if "hostPort" in p]
        if kept:
            c["ports"] = kept
        else:
            c.pop("ports", None)
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            tcp = c.get(probe, {}).get("tcpSocket")
            if tcp and isinstance(tcp.get("port"), str):
                tcp["port"] = numbers[tcp["port"]]


def field_value(path, meta, node_ip, hostnetwork):
    if path == "status.podIP":
        return node_ip  # the node's address for a hostNetwork pod, else the pod's own (--ip)
    if path in ("metadata.name", "metadata.namespace"):
        return meta[path.split(".")[1]]
    m = re.fullmatch(r"metadata\.labels\['([^']+)'\]", path)
    if m and m.group(1) in meta.get("labels", {}):
        return meta["labels"][m.group(1)]
    sys.exit(f"kubepods: no stand-in for fieldRef {path}")


def kubelet_env(spec, meta, node_ip, configmaps=None):
    """What the kubelet does and podman 4.x does not: resolve the downward-API env (podman knows no
    `status.podIP`) and expand $(VAR) in command and args (podman passes "$(POD_IP)" literally).
    The env names and the args stay as rendered; only their values are filled in here."""
    for c in spec["containers"]:
        values = {}
        for env in c.get("env", []):
            ref = env.get("valueFrom", {}).get("fieldRef")
            cm = env.get("valueFrom", {}).get("configMapKeyRef")
            if cm:
                data = (configmaps or {}).get(cm["name"], {}).get("data", {})
                if cm["key"] not in data:
                    sys.exit(f"kubepods: no ConfigMap key {cm['name']}/{cm['key']}")
                del env["valueFrom"]
                env["value"] = data[cm["key"]]
            elif ref:
                del env["valueFrom"]
                env["value"] = field_value(ref["fieldPath"], meta, node_ip, spec.get("hostNetwork"))
            if "value" in env:
                values[env["name"]] = env["value"]

        def expand(arg):
            return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                          lambda m: "$" if m.group(0) == "$$" else values.get(m.group(1), m.group(0)), arg)

        for key in ("command", "args"):
            if key in c:
                c[key] = [expand(a) for a in c[key]]


def seccomp_annotation(template):
    """podman 4.x reads no securityContext.seccompProfile, only the (pre-1.27) pod annotation, and
    looks the profile up by its file name directly under --seccomp-profile-root. The same
    Localhost profile is named there; the script points --seccomp-profile-root at the kubelet
    seccomp root's profile directory (profiles/)."""
    profile = template["spec"].get("securityContext", {}).get("seccompProfile", {})
    if profile.get("type") != "Localhost":
        sys.exit(f"kubepods: expected a Localhost seccomp profile, found {profile}")
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations["seccomp.security.alpha.kubernetes.io/pod"] = "localhost/" + os.path.basename(profile["localhostProfile"])
    return profile["localhostProfile"]


def job_pods(job, svc, configmaps, subnet):
    """The pods the Job controller makes for an Indexed Job: one per completion index."""
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        sys.exit(f"kubepods: Job {job['metadata']['name']} is not Indexed")
    if spec.get("parallelism", 1) < spec["completions"]:
        sys.exit("kubepods: parallelism below completions: the fleet would not run at once")
    pods = []
    for i in range(spec["completions"]):
        template = copy.deepcopy(spec["template"])
        name = f"{job['metadata']['name']}-{i}"
        labels = dict(template["metadata"].get("labels", {}))
        labels.update({"job-name": job["metadata"]["name"], "batch.kubernetes.io/job-name": job["metadata"]["name"],
                       "batch.kubernetes.io/job-completion-index": str(i)})
        meta = {"name": name, "namespace": job["metadata"].get("namespace"), "labels": labels,
                "annotations": {"batch.kubernetes.io/job-completion-index": str(i)}}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}
        if pod["spec"].get("restartPolicy") != "Never":
            sys.exit("kubepods: an Indexed Job's pods should have restartPolicy Never")
        for c in pod["spec"]["containers"]:
            c.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(i)})
        address = f"{subnet}.{10 + i}"
        host_network_ports(pod["spec"])
        kubelet_env(pod["spec"], meta, address, configmaps)
        pod["spec"].setdefault("hostAliases", []).append({"ip": None, "hostnames": [svc["metadata"]["name"]]})
        seccomp_annotation(pod)
        pods.append((name, address, pod))
    return pods


def main():
    p = argparse.ArgumentParser()
    p.add_argument("all")
    p.add_argument("out")
    p.add_argument("--sink-address", required=True)
    p.add_argument("--sender-address")
    p.add_argument("--job-subnet", help="A.B.C: the Job's pods get A.B.C.10, .11, ...")
    args = p.parse_args()
    docs = [d for d in yaml.safe_load_all(open(args.all)) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("Secret", "DaemonSet", "Service"):
        if len(by_kind.get(kind, [])) != 1:
            sys.exit(f"kubepods: expected one {kind} in {args.all}, found {len(by_kind.get(kind, []))}")
    deploys, jobs = by_kind.get("Deployment", []), by_kind.get("Job", [])
    if len(deploys) + len(jobs) != 1:
        sys.exit(f"kubepods: expected one sender Deployment or Job, found {len(deploys)} and {len(jobs)}")
    if deploys and not args.sender_address:
        sys.exit("kubepods: a Deployment needs --sender-address")
    if jobs and not args.job_subnet:
        sys.exit("kubepods: a Job needs --job-subnet")
    secret, ds, svc = (by_kind[k][0] for k in ("Secret", "DaemonSet", "Service"))
    configmaps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    template = ds["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": ds["metadata"]["name"],
            "namespace": ds["metadata"].get("namespace"),
            "labels": dict(template["metadata"].get("labels", {})),
        },
        "spec": copy.deepcopy(template["spec"]),
    }
    host_network_ports(pod["spec"])
    kubelet_env(pod["spec"], pod["metadata"], args.sink_address, configmaps)
    profiles = {seccomp_annotation(pod)}
    files = [("secret", secret), ("sink", pod)]
    if deploys:
        deploy = deploys[0]
        sender = copy.deepcopy(deploy)
        sender_meta = dict(sender["spec"]["template"]["metadata"], name=sender["metadata"]["name"],
                           namespace=sender["metadata"].get("namespace"))
        host_network_ports(sender["spec"]["template"]["spec"])
        kubelet_env(sender["spec"]["template"]["spec"], sender_meta, args.sender_address, configmaps)
        aliases = sender["spec"]["template"]["spec"].setdefault("hostAliases", [])
        aliases.append({"ip": args.sink_address, "hostnames": [svc["metadata"]["name"]]})
        profiles.add(seccomp_annotation(sender["spec"]["template"]))
        files.append(("sender", sender))
        what = f"Deployment {deploy['metadata']['name']}"
    else:
        pods = job_pods(jobs[0], svc, configmaps, args.job_subnet)
        lines = []
        for i, (name, address, jpod) in enumerate(pods):
            jpod["spec"]["hostAliases"][-1]["ip"] = args.sink_address
            files.append((f"job-{i}", jpod))
            lines.append(f"{name} {address} {os.path.join(args.out, f'job-{i}.yaml')}\n")
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "job-pods.txt"), "w") as f:
            f.writelines(lines)
        what = f"Indexed Job {jobs[0]['metadata']['name']} as Pods {', '.join(n for n, _, _ in pods)}"
    os.makedirs(args.out, exist_ok=True)
    for name, doc in files:
        with open(os.path.join(args.out, f"{name}.yaml"), "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
    left = sorted(d["kind"] for d in docs if d["kind"] not in ("Secret", "DaemonSet", "Deployment"))
    print(f"kubepods: seccomp (Localhost) {', '.join(sorted(profiles))}; Pod {pod['metadata']['name']} from the DaemonSet, {what}, "
          f"Secret {secret['metadata']['name']}; not modelled by podman: {', '.join(left)}")


if __name__ == "__main__":
    main()
