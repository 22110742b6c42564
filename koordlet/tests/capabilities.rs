#![allow(clippy::unwrap_used)]
//! `koordlet capabilities` on this machine, checked against what the test
//! reads from /proc and /sys itself.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use koord_common::testing::TempDir;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");

/// The binary with no node name and no cluster configuration.
fn capabilities(args: &[&str]) -> Output {
    Command::new(BIN)
        .env_remove("NODE_NAME")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .args(args)
        .output()
        .unwrap()
}

fn stdout_of(args: &[&str]) -> String {
    let output = capabilities(args);
    assert!(
        output.status.success(),
        "{args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn json_output() -> Value {
    let text = stdout_of(&["capabilities", "--output", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("not JSON ({err}):\n{text}"))
}

/// The test's own CPU-list reader ("0-3,8").
fn count_cpu_list(text: &str) -> usize {
    text.trim()
        .split(',')
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// Enabled controllers bound to a v1 hierarchy, per /proc/cgroups.
fn v1_controllers_from_proc() -> BTreeSet<String> {
    fs::read_to_string("/proc/cgroups")
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            (cols.len() == 4 && cols[1] != "0" && cols[3] == "1").then(|| cols[0].to_string())
        })
        .collect()
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn json_matches_what_the_machine_says() {
    let caps = json_output();

    // Kernel release.
    let osrelease = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(caps["kernel"], osrelease.trim());

    // Online CPUs and NUMA nodes.
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert_eq!(caps["cpus"], count_cpu_list(&online));
    assert_eq!(
        caps["cpuTopology"].as_array().unwrap().len(),
        count_cpu_list(&online)
    );
    let nodes = fs::read_dir("/sys/devices/system/node")
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix("node")
                        .is_some_and(|id| id.parse::<u32>().is_ok())
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(caps["numaNodes"], nodes);

    // SMT: some CPU lists more than itself as a thread sibling.
    let smt = fs::read_dir("/sys/devices/system/cpu")
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_to_string(e.path().join("topology/thread_siblings_list")).ok())
        .any(|list| count_cpu_list(&list) > 1);
    assert_eq!(caps["smt"], smt);

    // Node PSI.
    let psi = ["cpu", "memory", "io"].iter().all(|r| {
        fs::read_to_string(format!("/proc/pressure/{r}")).is_ok_and(|t| t.starts_with("some "))
    });
    assert_eq!(caps["psi"], psi);

    // resctrl.
    let resctrl = Path::new("/sys/fs/resctrl/info").is_dir();
    assert_eq!(caps["resctrl"]["supported"], resctrl);
    if !resctrl {
        assert_eq!(caps["resctrl"]["cat"], false);
        assert_eq!(caps["resctrl"]["mba"], false);
        assert_eq!(caps["resctrl"]["closids"], Value::Null);
        assert!(
            caps["reasons"]["resctrl"]
                .as_str()
                .unwrap()
                .contains("/sys/fs/resctrl")
        );
    }

    // Core scheduling, asked of the kernel directly.
    let core_sched = rustix::thread::core_scheduling_cookie(
        rustix::thread::gettid(),
        rustix::thread::CoreSchedulingScope::Thread,
    )
    .is_ok()
        || Path::new("/proc/sys/kernel/sched_core").exists();
    assert_eq!(caps["coreSched"], core_sched);
    if !core_sched {
        assert!(caps["reasons"]["coreSched"].is_string());
    }

    // Cgroup layout.
    let v1 = v1_controllers_from_proc();
    let cgroup = &caps["cgroup"];
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        assert_eq!(cgroup["version"], "v2");
    } else if v1.contains("cpu") {
        assert_eq!(strings(&cgroup["v1Controllers"]), v1, "{cgroup}");
        for controller in &v1 {
            assert!(
                strings(&cgroup["controllers"]).contains(controller),
                "{controller}"
            );
        }
        let unified = fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers").ok();
        assert_eq!(cgroup["unifiedMount"], unified.is_some());
        let unified_resource = unified.as_deref().is_some_and(|list| {
            list.split_whitespace()
                .any(|c| ["cpu", "cpuset", "memory", "io", "pids"].contains(&c))
        });
        let expected = if unified_resource { "hybrid" } else { "v1" };
        assert_eq!(cgroup["version"], expected, "{cgroup}");

        let cpu = Path::new("/sys/fs/cgroup/cpu");
        assert_eq!(caps["cpuBurst"], cpu.join("cpu.cfs_burst_us").exists());
        assert_eq!(caps["cpuIdle"], cpu.join("cpu.idle").exists());
        assert_eq!(caps["groupIdentity"], cpu.join("cpu.bvt_warp_ns").exists());
        let driver = if cpu.join("kubepods.slice").is_dir() {
            "systemd"
        } else if cpu.join("kubepods").is_dir() {
            "cgroupfs"
        } else {
            "unknown"
        };
        assert_eq!(cgroup["driver"], driver);
    }
}

/// The issue's statement about this CI machine (root, cgroup v1 hierarchies
/// at /sys/fs/cgroup/<controller>); skipped elsewhere.
#[test]
fn this_machine_is_reported_as_cgroup_v1_with_burst_psi_and_no_resctrl() {
    if !Path::new("/sys/fs/cgroup/cpu/tasks").exists() {
        println!("SKIP: not a cgroup v1 machine");
        return;
    }
    let caps = json_output();
    assert_eq!(caps["cgroup"]["version"], "v1");
    let controllers = strings(&caps["cgroup"]["controllers"]);
    for controller in ["cpu", "cpuset", "memory", "blkio"] {
        assert!(
            controllers.contains(controller),
            "{controller} in {controllers:?}"
        );
    }
    assert_eq!(
        caps["cpuBurst"],
        Path::new("/sys/fs/cgroup/cpu/cpu.cfs_burst_us").exists()
    );
    assert_eq!(caps["psi"], Path::new("/proc/pressure/cpu").exists());
    assert_eq!(
        caps["resctrl"]["supported"],
        Path::new("/sys/fs/resctrl/info").exists()
    );
}

#[test]
fn table_states_the_same_facts() {
    let caps = json_output();
    let table = stdout_of(&["capabilities"]);
    let value = |key: &str| -> String {
        table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} row in\n{table}"))
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    let plain = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for (row, json) in [
        ("cgroup.version", &caps["cgroup"]["version"]),
        ("cgroup.driver", &caps["cgroup"]["driver"]),
        ("cpuBurst", &caps["cpuBurst"]),
        ("cpuIdle", &caps["cpuIdle"]),
        ("psi", &caps["psi"]),
        ("coreSched", &caps["coreSched"]),
        ("groupIdentity", &caps["groupIdentity"]),
        ("resctrl.supported", &caps["resctrl"]["supported"]),
        ("smt", &caps["smt"]),
        ("numaNodes", &caps["numaNodes"]),
        ("cpus", &caps["cpus"]),
        ("kernel", &caps["kernel"]),
    ] {
        assert_eq!(value(row), plain(json), "{row}");
    }
    let controllers: Vec<String> = strings(&caps["cgroup"]["controllers"])
        .into_iter()
        .collect();
    assert_eq!(value("cgroup.controllers"), controllers.join(","));
    let osrelease = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(table.contains(osrelease.trim()));
    // Host applications: the knobs follow the cpuset controller and group
    // identity as the matrix reports them.
    let cpuset = caps["cgroup"]["controllers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "cpuset");
    let bvt = caps["groupIdentity"] == Value::Bool(true);
    assert_eq!(caps["hostApplications"]["cpuset"], Value::Bool(cpuset));
    assert_eq!(caps["hostApplications"]["groupIdentity"], Value::Bool(bvt));
    let knobs: Vec<&str> = [("cpuset.cpus", cpuset), ("cpu.bvt_warp_ns", bvt)]
        .into_iter()
        .filter_map(|(knob, ok)| ok.then_some(knob))
        .collect();
    let want = if knobs.is_empty() {
        "none".to_string()
    } else {
        knobs.join(",")
    };
    assert_eq!(value("hostApplications"), want);
    if !bvt {
        assert!(
            caps["reasons"]["hostApplications"]
                .as_str()
                .unwrap()
                .contains("cpu.bvt_warp_ns not enforced"),
            "{}",
            caps["reasons"]
        );
    }
}

#[test]
fn top_level_root_flags_apply_and_go_spelling_works() {
    let dir = TempDir::new("caps-cli").unwrap();
    let proc_root = dir.path().join("proc");
    fs::create_dir_all(proc_root.join("sys/kernel")).unwrap();
    fs::write(proc_root.join("sys/kernel/osrelease"), "9.9.9-generated\n").unwrap();
    let proc_flag = format!("-proc-root-dir={}", proc_root.display());
    let text = stdout_of(&[&proc_flag, "capabilities", "-output=json"]);
    let caps: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(caps["kernel"], "9.9.9-generated");
    assert_eq!(
        caps["psi"], false,
        "no pressure files in the generated /proc"
    );
}

#[test]
fn an_unknown_output_format_is_a_usage_error() {
    let output = capabilities(&["capabilities", "--output", "xml"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("xml"));
}

/// In cluster mode the matrix reaches the Node as a JSON merge patch: one
/// label per capability under `node.koordinator.sh/capability-` and the
/// whole matrix in the `node.koordinator.sh/capabilities` annotation.
#[test]
fn cluster_mode_patches_the_node_with_the_capability_labels_and_annotation() {
    use koord_common::testing::{
        FakeApiServer, PROCESS_WAIT, TestProcess, command_with_kubeconfig, write_kubeconfig,
    };
    const NODE: &str = "cap-node";
    let node_path = format!("/api/v1/nodes/{NODE}");
    let api = FakeApiServer::start().unwrap();
    api.respond(
        "PATCH",
        &node_path,
        200,
        &format!(r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{NODE}"}}}}"#),
    );
    let dir = TempDir::new("koordlet-capability-patch").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command
        .env("NODE_NAME", NODE)
        .args(["--addr=127.0.0.1:0", "--v=4"]);
    let mut koordlet = TestProcess::spawn(command).unwrap();

    let patch = api
        .wait_for_request("PATCH", &node_path, PROCESS_WAIT)
        .unwrap_or_else(|| panic!("no Node patch:\n{}", koordlet.output()));
    koordlet
        .expect_line("node capabilities published", PROCESS_WAIT)
        .unwrap();
    koordlet.stop_cleanly("TERM", PROCESS_WAIT).unwrap();

    assert_eq!(
        patch.header("content-type"),
        Some("application/merge-patch+json")
    );
    let body: Value = serde_json::from_str(&patch.body)
        .unwrap_or_else(|err| panic!("patch body is not JSON ({err}): {}", patch.body));
    let metadata = body["metadata"].as_object().unwrap();
    assert_eq!(
        metadata.keys().collect::<Vec<_>>(),
        ["annotations", "labels"],
        "only labels and annotations are patched"
    );
    let labels = metadata["labels"].as_object().unwrap();
    assert!(
        labels
            .keys()
            .all(|key| key.starts_with("node.koordinator.sh/capability-")),
        "{labels:?}"
    );
    let label = |name: &str| {
        labels[&format!("node.koordinator.sh/capability-{name}")]
            .as_str()
            .unwrap()
            .to_string()
    };
    // What the machine says, read here.
    let exists = |path: &str| Path::new(path).exists().to_string();
    assert_eq!(
        label("cpu-burst"),
        exists("/sys/fs/cgroup/cpu/cpu.cfs_burst_us")
    );
    assert_eq!(label("cpu-idle"), exists("/sys/fs/cgroup/cpu/cpu.idle"));
    assert_eq!(label("psi"), exists("/proc/pressure/cpu"));
    assert_eq!(label("resctrl"), exists("/sys/fs/resctrl/info"));
    if Path::new("/sys/fs/cgroup/cpu/tasks").exists() {
        assert_eq!(label("cgroup-version"), "v1");
    }
    let numa_nodes = fs::read_dir("/sys/devices/system/node")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    name.strip_prefix("node")
                        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(label("numa-nodes"), numa_nodes.max(1).to_string());
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let release = release.trim();
    // Label values allow [A-Za-z0-9._-], at most 63 characters, alphanumeric ends.
    let sanitized: String = release
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    let expected = sanitized.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    assert_eq!(label("kernel"), expected);

    // The annotation is the documented `capabilities --output json` object.
    let annotation = metadata["annotations"]["node.koordinator.sh/capabilities"]
        .as_str()
        .unwrap();
    let published: Value = serde_json::from_str(annotation).unwrap();
    // ... without the `nri` entry, which describes the runtime, not the
    // node, nor the kubelet's CPU manager (it changes with every pinned pod),
    // nor the CPU reaction path (a daemon setting probed by the command).
    let mut printed = json_output();
    printed.as_object_mut().unwrap().remove("nri");
    printed.as_object_mut().unwrap().remove("kubeletCpuManager");
    // Nor device discovery (the Device object carries it).
    printed.as_object_mut().unwrap().remove("devices");
    printed.as_object_mut().unwrap().remove("cpuReaction");
    // Nor network QoS (probed by the command; the daemon logs it).
    printed.as_object_mut().unwrap().remove("networkQos");
    // Nor blkio volume support (probed by the command, like the reaction path).
    printed.as_object_mut().unwrap().remove("blkioVolumes");
    printed["reasons"].as_object_mut().unwrap().remove("nri");
    printed["reasons"]
        .as_object_mut()
        .unwrap()
        .remove("networkQos");
    // Nor the host-application row (derived from the matrix by the command).
    printed.as_object_mut().unwrap().remove("hostApplications");
    printed["reasons"]
        .as_object_mut()
        .unwrap()
        .remove("hostApplications");
    assert_eq!(published, printed);
    assert!(published.get("nri").is_none());
}

/// Upstream's default NRI socket (`nri/nri.sock` below `/var/run/`).
const DEFAULT_NRI_SOCKET: &str = "/var/run/nri/nri.sock";

#[test]
fn nri_entry_reports_the_default_socket_as_this_machine_has_it() {
    let caps = json_output();
    let nri = &caps["nri"];
    assert_eq!(nri["socket"], DEFAULT_NRI_SOCKET);
    let present = Path::new(DEFAULT_NRI_SOCKET).exists();
    assert_eq!(nri["present"], present);
    assert_eq!(nri["pluginEnabled"], true);
    if !present {
        // This machine runs no container runtime.
        assert_eq!(nri["accepting"], false);
        assert!(
            caps["reasons"]["nri"]
                .as_str()
                .unwrap()
                .contains("no NRI socket"),
            "{caps}"
        );
    }
    let table = stdout_of(&["capabilities"]);
    let row = table
        .lines()
        .find(|line| line.split_whitespace().next() == Some("nri.present"))
        .unwrap_or_else(|| panic!("no nri.present row in\n{table}"));
    assert_eq!(
        row.split_whitespace().nth(1),
        Some(present.to_string().as_str())
    );
}

#[test]
fn nri_entry_sees_a_listening_socket_given_by_flag() {
    let dir = TempDir::new("caps-nri").unwrap();
    let socket = dir.path().join("nri.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let flag = format!("--runtime-hooks-nri-socket-path={}", socket.display());
    let text = stdout_of(&[&flag, "capabilities", "--output", "json"]);
    let caps: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(caps["nri"]["socket"], socket.display().to_string());
    assert_eq!(caps["nri"]["present"], true);
    assert_eq!(caps["nri"]["accepting"], true);
    assert!(caps["reasons"].get("nri").is_none(), "{caps}");
    // The probe really connected (the connection waits in the backlog).
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_ok(),
        "no connection reached the listener"
    );

    // A socket file nobody listens on any more: present, not accepting.
    drop(listener);
    let text = stdout_of(&[&flag, "capabilities", "-o", "json"]);
    let caps: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(caps["nri"]["present"], true);
    assert_eq!(caps["nri"]["accepting"], false);
    assert!(
        caps["reasons"]["nri"]
            .as_str()
            .unwrap()
            .contains("refuses connections"),
        "{caps}"
    );
}

/// The kubelet CPU manager entry reads `cpu_manager_state` below
/// `--var-lib-kubelet-dir` and says which CPUs the static policy pinned.
#[test]
fn the_kubelet_cpu_manager_entry_names_policy_and_pinned_cpus() {
    let dir = TempDir::new("caps-kubelet").unwrap();
    let kubelet_flag = format!("-var-lib-kubelet-dir={}", dir.path().display());

    // No checkpoint: unknown, treated as none.
    let caps: Value =
        serde_json::from_str(&stdout_of(&[&kubelet_flag, "capabilities", "-output=json"])).unwrap();
    assert_eq!(caps["kubeletCpuManager"]["policy"], "");
    assert_eq!(caps["kubeletCpuManager"]["source"], "unknown");
    assert_eq!(caps["kubeletCpuManager"]["pinnedCpus"], "");

    fs::write(
        dir.path().join("cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"uid-g":{"app":"1"}},"checksum":42}"#,
    )
    .unwrap();
    let caps: Value =
        serde_json::from_str(&stdout_of(&[&kubelet_flag, "capabilities", "-output=json"])).unwrap();
    let kubelet = &caps["kubeletCpuManager"];
    assert_eq!(kubelet["policy"], "static");
    assert_eq!(kubelet["source"], "checkpoint");
    assert_eq!(kubelet["defaultCpuSet"], "0");
    assert_eq!(kubelet["pinnedCpus"], "1");
    assert_eq!(kubelet["pinnedPods"][0], "uid uid-g: 1");
    let table = stdout_of(&[&kubelet_flag, "capabilities"]);
    let row = table
        .lines()
        .find(|line| line.starts_with("kubeletCpuManager.pinnedCpus"))
        .unwrap_or_else(|| panic!("no pinnedCpus row in\n{table}"));
    assert_eq!(row.split_whitespace().nth(1), Some("1"), "{row}");

    // Malformed: still succeeds, and says why the file was left out.
    fs::write(
        dir.path().join("cpu_manager_state"),
        r#"{"defaultCpuSet":"0"}"#,
    )
    .unwrap();
    let caps: Value =
        serde_json::from_str(&stdout_of(&[&kubelet_flag, "capabilities", "-output=json"])).unwrap();
    let problem = caps["kubeletCpuManager"]["problems"][0].as_str().unwrap();
    assert!(
        problem.contains("cpu_manager_state") && problem.contains("policyName"),
        "{problem}"
    );
}

/// `blkio.volumes` and `blkio.iocost` describe this machine: the BE tier's
/// throttle file, device-mapper devices, and blk-iocost at the root.
#[test]
fn blkio_volume_rows_match_this_machine() {
    let table = stdout_of(&["capabilities"]);
    let row = |name: &str| {
        table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row in\n{table}"))
            .to_string()
    };
    let throttle =
        Path::new("/sys/fs/cgroup/blkio/kubepods/besteffort/blkio.throttle.read_bps_device")
            .exists();
    let volumes = row("blkio.volumes");
    assert_eq!(
        volumes.split_whitespace().nth(1),
        Some(if throttle { "throttle" } else { "unsupported" }),
        "{volumes}"
    );
    let device_mapper = fs::read_dir("/sys/block")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with("dm-"))
        })
        .unwrap_or(false);
    assert_eq!(
        volumes.contains("no device-mapper devices"),
        !device_mapper,
        "{volumes}"
    );
    let iocost = Path::new("/sys/fs/cgroup/blkio/blkio.cost.qos").exists()
        || Path::new("/sys/fs/cgroup/io.cost.qos").exists();
    let iocost_row = row("blkio.iocost");
    assert_eq!(
        iocost_row.split_whitespace().nth(1),
        Some(if iocost { "supported" } else { "unsupported" }),
        "{iocost_row}"
    );
    println!("{volumes}\n{iocost_row}");
    let json = json_output();
    assert_eq!(json["blkioVolumes"]["iocost"], iocost);
    assert_eq!(json["blkioVolumes"]["deviceMapper"], device_mapper);
}
