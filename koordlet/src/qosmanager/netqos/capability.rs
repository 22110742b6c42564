//! Whether this node can do network QoS the way [`super`] does it: a usable
//! rtnetlink socket, the HTB qdisc and the u32 classifier. The kernel is
//! asked without changing anything: the qdisc and classifier are looked up
//! by their entry points in `<proc>/kallsyms` (built in or loaded) or by
//! their module files (loadable on first use). The cgroup classifier, which
//! upstream's host-network path needs, is reported for information.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Key of the row in `koordlet capabilities`.
pub const NETWORK_QOS_KEY: &str = "networkQos";
/// At most this much of kallsyms is scanned (a kernel lists a few MiB).
const MAX_KALLSYMS_BYTES: u64 = 256 << 20;

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetQosCapability {
    /// netlink, HTB and u32 are all there.
    pub supported: bool,
    pub netlink: bool,
    /// `None` when it could not be told (kallsyms unreadable, no modules dir).
    pub htb: Option<bool>,
    pub u32_classifier: Option<bool>,
    pub cgroup_classifier: Option<bool>,
    /// What is missing, or what was found.
    pub detail: String,
}

/// Kernel symbols and module names of the parts probed.
const HTB: (&str, &str) = ("htb_enqueue", "sch_htb");
const U32: (&str, &str) = ("u32_classify", "cls_u32");
const CGROUP: (&str, &str) = ("cls_cgroup_classify", "cls_cgroup");

/// Probes with `proc_root` (for kallsyms and the kernel release) and
/// `modules_root` (`/lib/modules`); `netlink_ok` is the outcome of opening
/// a route socket (the caller's, so tests can vary it).
pub fn probe(
    proc_root: &Path,
    modules_root: &Path,
    netlink: Result<(), String>,
) -> NetQosCapability {
    let symbols = kernel_symbols(&proc_root.join("kallsyms"), &[HTB.0, U32.0, CGROUP.0]);
    let release = std::fs::read_to_string(proc_root.join("sys/kernel/osrelease"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.len() < 256 && !s.contains('/'));
    let module_dir = release.map(|r| modules_root.join(r).join("kernel/net/sched"));
    let present = |(symbol, module): (&str, &str)| -> Option<bool> {
        let built_in_or_loaded = symbols
            .as_ref()
            .map(|found| found.iter().any(|s| s == symbol));
        let loadable = module_dir.as_ref().map(|dir| {
            ["ko", "ko.xz", "ko.zst", "ko.gz"]
                .iter()
                .any(|ext| dir.join(format!("{module}.{ext}")).is_file())
        });
        match (built_in_or_loaded, loadable) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), _) => Some(false),
            _ => None,
        }
    };
    let htb = present(HTB);
    let u32_classifier = present(U32);
    let cgroup_classifier = present(CGROUP);
    let mut missing = Vec::new();
    if let Err(err) = &netlink {
        missing.push(format!("no rtnetlink socket: {err}"));
    }
    for (name, state) in [
        ("HTB qdisc (sch_htb)", htb),
        ("u32 classifier (cls_u32)", u32_classifier),
    ] {
        match state {
            Some(true) => {}
            Some(false) => missing.push(format!(
                "{name} is neither built in, loaded nor installed as a module"
            )),
            None => missing.push(format!(
                "{name}: cannot tell (kallsyms unreadable and no module directory)"
            )),
        }
    }
    let supported = missing.is_empty();
    let cgroup_note = match cgroup_classifier {
        Some(true) => "cgroup classifier present (not used: pods are classified by IP)",
        Some(false) => "no cgroup classifier (not needed: pods are classified by IP)",
        None => "cgroup classifier unknown (not needed)",
    };
    let detail = if supported {
        format!("rtnetlink, HTB and u32 available; {cgroup_note}")
    } else {
        format!("{}; {cgroup_note}", missing.join("; "))
    };
    NetQosCapability {
        supported,
        netlink: netlink.is_ok(),
        htb,
        u32_classifier,
        cgroup_classifier,
        detail,
    }
}

/// Probes this host: opens a route socket in the current network namespace.
pub fn probe_host(proc_root: &Path) -> NetQosCapability {
    let netlink = super::netlink::RouteSocket::open()
        .map(|_| ())
        .map_err(|err| err.to_string());
    probe(proc_root, Path::new("/lib/modules"), netlink)
}

/// Which of `wanted` appear as symbol names in kallsyms; `None` when it
/// cannot be read.
fn kernel_symbols(path: &Path, wanted: &[&str]) -> Option<Vec<String>> {
    let file = std::fs::File::open(path).ok()?;
    let reader = BufReader::new(file.take(MAX_KALLSYMS_BYTES));
    let mut found = Vec::new();
    let mut read_any = false;
    for line in reader.lines() {
        let line = line.ok()?;
        read_any = true;
        // "<address> <type> <name>[\t[module]]"
        let Some(name) = line.split_whitespace().nth(2) else {
            continue;
        };
        if wanted.contains(&name) && !found.iter().any(|f| f == name) {
            found.push(name.to_string());
        }
    }
    read_any.then_some(found)
}
