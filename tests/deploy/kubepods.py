#!/usr/bin/env python3
"""Turns the kustomize output of deploy/kubernetes into what `podman kube play` runs
(scripts/deploy-smoke.sh).

  kubepods.py ALL.YAML OUTDIR --sink-address IP --sender-address IP

Writes, from the rendered manifests and nothing else:
  OUTDIR/secret.yaml   the Secret (kustomize's ringblast-control-<hash>), unchanged;
  OUTDIR/sink.yaml     the DaemonSet's pod template as a Pod: kube play takes Pods and
                       Deployments, not DaemonSets (name, namespace and labels from the
                       DaemonSet and its template, spec = the template's spec, unchanged);
  OUTDIR/sender.yaml   the sender Deployment, with one addition: a hostAliases entry that maps
                       the headless Service's name to the sink node's address, which is what the
                       cluster DNS would answer (podman models no Services).
In both pod specs the downward-API env is resolved and $(VAR) in args expanded, as the kubelet
does (see kubelet_env; status.podIP is the node address, as for any hostNetwork pod), containerPorts on the host network are dropped and probes get port numbers
instead of names (see host_network_ports); args, env, security context, volumes stay as rendered.
The pod-level seccompProfile (Localhost) is also given as the annotation podman reads (see
seccomp_annotation). Prints what it left out (Namespace, Service, PodMonitor: checked by schema only).
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
    only names the node's port, so it is dropped, and probes that name it get its number."""
    if not spec.get("hostNetwork"):
        return
    for c in spec["containers"]:
        numbers = {p["name"]: p["containerPort"] for p in c.pop("ports", []) if "name" in p and p.get("protocol", "TCP") == "TCP"}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            tcp = c.get(probe, {}).get("tcpSocket")
            if tcp and isinstance(tcp.get("port"), str):
                tcp["port"] = numbers[tcp["port"]]


def field_value(path, meta, node_ip, hostnetwork):
    if path == "status.podIP":
        if not hostnetwork:
            sys.exit("kubepods: status.podIP outside the host network has no stand-in")
        return node_ip  # what the kubelet gives a hostNetwork pod: the node's address
    if path in ("metadata.name", "metadata.namespace"):
        return meta[path.split(".")[1]]
    m = re.fullmatch(r"metadata\.labels\['([^']+)'\]", path)
    if m and m.group(1) in meta.get("labels", {}):
        return meta["labels"][m.group(1)]
    sys.exit(f"kubepods: no stand-in for fieldRef {path}")


def kubelet_env(spec, meta, node_ip):
    """What the kubelet does and podman 4.x does not: resolve the downward-API env (podman knows no
    `status.podIP`) and expand $(VAR) in command and args (podman passes "$(POD_IP)" literally).
    The env names and the args stay as rendered; only their values are filled in here."""
    for c in spec["containers"]:
        values = {}
        for env in c.get("env", []):
            ref = env.get("valueFrom", {}).get("fieldRef")
            if ref:
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("all")
    p.add_argument("out")
    p.add_argument("--sink-address", required=True)
    p.add_argument("--sender-address", required=True)
    args = p.parse_args()
    docs = [d for d in yaml.safe_load_all(open(args.all)) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("Secret", "DaemonSet", "Deployment", "Service"):
        if len(by_kind.get(kind, [])) != 1:
            sys.exit(f"kubepods: expected one {kind} in {args.all}, found {len(by_kind.get(kind, []))}")
    secret, ds, deploy, svc = (by_kind[k][0] for k in ("Secret", "DaemonSet", "Deployment", "Service"))
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
    sender = copy.deepcopy(deploy)
    sender_meta = dict(sender["spec"]["template"]["metadata"], name=sender["metadata"]["name"],
                       namespace=sender["metadata"].get("namespace"))
    for spec, meta, node_ip in ((pod["spec"], pod["metadata"], args.sink_address),
                                (sender["spec"]["template"]["spec"], sender_meta, args.sender_address)):
        host_network_ports(spec)
        kubelet_env(spec, meta, node_ip)
    aliases = sender["spec"]["template"]["spec"].setdefault("hostAliases", [])
    aliases.append({"ip": args.sink_address, "hostnames": [svc["metadata"]["name"]]})
    profiles = {seccomp_annotation(pod), seccomp_annotation(sender["spec"]["template"])}
    os.makedirs(args.out, exist_ok=True)
    for name, doc in (("secret", secret), ("sink", pod), ("sender", sender)):
        with open(os.path.join(args.out, f"{name}.yaml"), "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
    left = sorted(d["kind"] for d in docs if d["kind"] not in ("Secret", "DaemonSet", "Deployment"))
    print(f"kubepods: seccomp (Localhost) {', '.join(sorted(profiles))}; Pod {pod['metadata']['name']} from the DaemonSet, Deployment {deploy['metadata']['name']}, "
          f"Secret {secret['metadata']['name']}; not modelled by podman: {', '.join(left)}")


if __name__ == "__main__":
    main()
