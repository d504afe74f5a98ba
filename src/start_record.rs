//! What a run says about itself before its first figure, as iperf3's `start` block and flent's
//! plot titles do: ringblast's version and commit, the command line, the host (its name, the
//! kernel release, the CPU model and count, the NUMA nodes), the NIC and driver of the route to
//! the target, the wall-clock start (RFC 3339) and every parameter as the parser resolved it.
//! The CLI gathers it once the run's plan is resolved ([`prepare`]); the run writes it once
//! its descriptor budget and exporter are in place, before its groups start ([`emit`]) and
//! before anything else: a `"type":"start"` JSON line (with `--json`) and the first human line. Everything is read from `/proc` and `/sys`; what cannot be read is
//! null with its reason, never a guess.

use std::{net::SocketAddr, path::Path, sync::Mutex, time::SystemTime};

use serde_json::{Map, Value, json};

/// ringblast's version.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit ringblast was built from (`build.rs`); none from a source tree without git.
const COMMIT: Option<&str> = option_env!("RINGBLAST_COMMIT");

/// What the CLI knows about a run before it starts.
pub(crate) struct Run {
    /// `send`, `sink`, `pair` or `search`.
    pub(crate) role: &'static str,
    /// `udp` or `tcp`.
    pub(crate) protocol: &'static str,
    /// Where a sender sends, or the address a sink listens on.
    pub(crate) target: SocketAddr,
    /// Whether stdout carries JSON Lines.
    pub(crate) json: bool,
    /// Every parameter the parser resolved (long name → value), and the names the user set.
    pub(crate) parameters: Map<String, Value>,
    pub(crate) set: Vec<String>,
}

/// The run waiting for its start, with what was read about its host.
struct Pending {
    run: Run,
    host: Value,
    nic: Value,
    line_host: String,
    line_nic: String,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

/// Reads the host and the route's NIC for `run`, to be written when it starts ([`emit`]).
pub(crate) fn prepare(run: Run) {
    let (host, line_host) = host();
    let (nic, line_nic) = nic(run.target);
    let pending = Pending {
        run,
        host,
        nic,
        line_host,
        line_nic,
    };
    *PENDING.lock().unwrap_or_else(|e| e.into_inner()) = Some(pending);
}

/// Writes the prepared run's start record and first human line, once; later calls (a
/// search's trials) write nothing.
pub(crate) fn emit() {
    let Some(p) = PENDING.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    let started = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let command: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let commit = COMMIT.map_or_else(|| "commit unknown".to_string(), |c| format!("commit {c}"));
    let whither = match p.run.role {
        "sink" => format!("on {}", p.run.target),
        "pair" => format!("over {}", p.run.target.ip()),
        _ => format!("to {}", p.run.target),
    };
    crate::say!(
        "ringblast {VERSION} ({commit}) {} {} {whither}, started {started}; host {}; {}",
        p.run.role,
        p.run.protocol,
        p.line_host,
        p.line_nic
    );
    if p.run.json {
        crate::output::json_line(&json!({
            "type": "start",
            "role": p.run.role,
            "protocol": p.run.protocol,
            "version": VERSION,
            "commit": COMMIT,
            "command": command,
            "started_at": started,
            "target": if p.run.role == "pair" {
                p.run.target.ip().to_string()
            } else {
                p.run.target.to_string()
            },
            "host": p.host,
            "nic": p.nic,
            "parameters": p.run.parameters,
            "set": p.run.set,
        }));
    }
}

/// The first line of `path` (trimmed), or why it could not be read.
fn first_line(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().next().unwrap_or("").trim().to_string())
        .map_err(|e| format!("cannot read {path}: {e}"))
}

/// The host's name, kernel, CPUs and NUMA nodes: the record's `host` object and its text.
fn host() -> (Value, String) {
    let name = first_line("/proc/sys/kernel/hostname");
    let kernel = first_line("/proc/sys/kernel/osrelease");
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu_model(&cpuinfo);
    let root = Path::new(crate::topology::sysfs::SYSFS_ROOT);
    let online = crate::topology::sysfs::online_cpus(root)
        .map(|c| c.len())
        .ok();
    let allowed = crate::topology::allowed_cpus().map(|c| c.len()).ok();
    let nodes = crate::topology::sysfs::online_nodes(root)
        .map(|n| n.unwrap_or_else(|| vec![0]))
        .map_err(|e| e.to_string());
    let value = json!({
        "name": name.as_ref().ok(),
        "kernel": kernel.as_ref().ok(),
        "cpu_model": model,
        "cpus_online": online,
        "cpus_allowed": allowed,
        "numa_nodes": nodes.as_ref().ok(),
    });
    let text = format!(
        "{}, Linux {}, {} CPUs{} ({}), {} NUMA node{}",
        name.unwrap_or_else(|_| "(name unknown)".into()),
        kernel.unwrap_or_else(|_| "(release unknown)".into()),
        online.map_or_else(|| "?".to_string(), |n| n.to_string()),
        match (online, allowed) {
            (Some(o), Some(a)) if a < o => format!(", {a} allowed"),
            _ => String::new(),
        },
        model.unwrap_or("model unknown"),
        nodes.as_ref().map_or(0, Vec::len),
        if nodes.as_ref().map_or(0, Vec::len) == 1 {
            ""
        } else {
            "s"
        }
    );
    (value, text)
}

/// The first `model name` of `/proc/cpuinfo` (x86; other architectures may have none).
fn cpu_model(cpuinfo: &str) -> Option<&str> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim())
    })
}

/// The NIC the route to `target` leaves through (the one holding a sink's listen address),
/// and its driver: the record's `nic` object and its text.
fn nic(target: SocketAddr) -> (Value, String) {
    match crate::topology::egress::egress_interface(target) {
        Ok(name) => {
            let (driver, why) = driver(&name);
            let text = match (&driver, &why) {
                (Some(d), _) => format!("NIC {name} (driver {d})"),
                (None, Some(w)) => format!("NIC {name} (no driver: {w})"),
                (None, None) => format!("NIC {name}"),
            };
            (
                json!({"name": name, "driver": driver, "driver_unknown_reason": why}),
                text,
            )
        }
        Err(e) => (
            json!({"name": null, "driver": null, "unknown_reason": e.to_string()}),
            format!("NIC unknown ({e})"),
        ),
    }
}

/// The kernel driver bound to interface `name`, or why there is none.
fn driver(name: &str) -> (Option<String>, Option<String>) {
    let device = Path::new("/sys/class/net").join(name).join("device");
    if !device.exists() {
        return (
            None,
            Some("a virtual interface (no device behind it)".into()),
        );
    }
    match std::fs::read_link(device.join("driver")) {
        Ok(link) => (
            link.file_name().map(|f| f.to_string_lossy().into_owned()),
            None,
        ),
        Err(e) => (None, Some(format!("cannot read its driver link: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_is_the_first_model_name_and_none_without_one() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(cpu_model(x86), Some("Intel(R) Xeon(R) CPU @ 2.20GHz"));
        assert_eq!(cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n"), None);
    }

    #[test]
    fn loopback_is_a_virtual_interface_without_a_driver() {
        let (value, text) = nic("127.0.0.1:9".parse().unwrap());
        assert_eq!(value["name"], "lo");
        assert_eq!(value["driver"], Value::Null);
        assert!(
            value["driver_unknown_reason"]
                .as_str()
                .unwrap()
                .contains("virtual"),
            "{value}"
        );
        assert!(text.starts_with("NIC lo (no driver: a virtual"), "{text}");
    }

    #[test]
    fn a_wildcard_listen_address_has_no_nic_and_says_why() {
        let (value, text) = nic("0.0.0.0:9".parse().unwrap());
        assert_eq!(value["name"], Value::Null);
        assert!(value["unknown_reason"].is_string(), "{value}");
        assert!(text.starts_with("NIC unknown ("), "{text}");
    }
}
