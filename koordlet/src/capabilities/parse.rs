//! Pure parsers for the kernel files capability detection reads. Each takes
//! the file's text and returns a typed value or a [`ParseError`] naming what
//! was wrong; none of them touches the filesystem or panics on bad input.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Malformed content of a kernel or kubelet file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}: {detail} (in {content:?})")]
pub struct ParseError {
    /// Which kind of file, e.g. "/proc/cgroups".
    pub what: &'static str,
    /// What is wrong.
    pub detail: String,
    /// The offending line or value, cut to a readable length.
    pub content: String,
}

impl ParseError {
    fn new(what: &'static str, detail: impl Into<String>, content: &str) -> Self {
        const MAX: usize = 120;
        let content = match content.char_indices().nth(MAX) {
            Some((cut, _)) => format!("{}…", &content[..cut]),
            None => content.to_string(),
        };
        Self {
            what,
            detail: detail.into(),
            content,
        }
    }
}

/// One row of `/proc/cgroups`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupSubsystem {
    pub name: String,
    /// v1 hierarchy id; 0 when the controller is not on any v1 hierarchy.
    pub hierarchy: u32,
    pub num_cgroups: u64,
    pub enabled: bool,
}

/// Parses `/proc/cgroups` (`#subsys_name hierarchy num_cgroups enabled`).
pub fn parse_proc_cgroups(text: &str) -> Result<Vec<CgroupSubsystem>, ParseError> {
    const WHAT: &str = "/proc/cgroups";
    let mut subsystems = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, hierarchy, num_cgroups, enabled] = fields[..] else {
            return Err(ParseError::new(WHAT, "expected 4 columns", line));
        };
        let number = |value: &str, column: &str| {
            value
                .parse::<u64>()
                .map_err(|_| ParseError::new(WHAT, format!("{column} is not a number"), line))
        };
        let hierarchy = u32::try_from(number(hierarchy, "hierarchy")?)
            .map_err(|_| ParseError::new(WHAT, "hierarchy out of range", line))?;
        let enabled = match enabled {
            "1" => true,
            "0" => false,
            _ => return Err(ParseError::new(WHAT, "enabled must be 0 or 1", line)),
        };
        subsystems.push(CgroupSubsystem {
            name: name.to_string(),
            hierarchy,
            num_cgroups: number(num_cgroups, "num_cgroups")?,
            enabled,
        });
    }
    Ok(subsystems)
}

/// Which cgroup filesystem a mount is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupFs {
    /// `cgroup`: a v1 hierarchy.
    V1,
    /// `cgroup2`: the unified hierarchy.
    V2,
}

/// A cgroup or cgroup2 mount found in the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub fs: CgroupFs,
    /// Mount point as the kernel prints it (octal escapes decoded).
    pub mount_point: String,
    /// Mount and superblock options; for v1 these include the controller
    /// names bound to the hierarchy (`cpu`, `cpuacct`, `name=systemd`, …).
    pub options: Vec<String>,
}

/// Parses `/proc/<pid>/mountinfo`, keeping only cgroup and cgroup2 mounts.
/// Lines of other filesystems are checked only for the `-` separator.
pub fn parse_mountinfo(text: &str) -> Result<Vec<CgroupMount>, ParseError> {
    const WHAT: &str = "mountinfo";
    let mut mounts = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        // id parent major:minor root mount-point options [optional...] - fstype source super-options
        let Some(separator) = fields.iter().position(|field| *field == "-") else {
            return Err(ParseError::new(WHAT, "no ' - ' separator", line));
        };
        if separator < 6 || fields.len() < separator + 3 {
            return Err(ParseError::new(WHAT, "too few fields", line));
        }
        let fs = match fields[separator + 1] {
            "cgroup" => CgroupFs::V1,
            "cgroup2" => CgroupFs::V2,
            _ => continue,
        };
        let mut options: Vec<String> = fields[5].split(',').map(str::to_string).collect();
        if let Some(super_options) = fields.get(separator + 3) {
            options.extend(super_options.split(',').map(str::to_string));
        }
        mounts.push(CgroupMount {
            fs,
            mount_point: unescape_mount_field(fields[4]),
            options,
        });
    }
    Ok(mounts)
}

/// Parses `/proc/mounts` (fstab format), keeping only cgroup and cgroup2 mounts.
pub fn parse_proc_mounts(text: &str) -> Result<Vec<CgroupMount>, ParseError> {
    const WHAT: &str = "/proc/mounts";
    let mut mounts = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 4 {
            return Err(ParseError::new(WHAT, "expected at least 4 fields", line));
        }
        let fs = match fields[2] {
            "cgroup" => CgroupFs::V1,
            "cgroup2" => CgroupFs::V2,
            _ => continue,
        };
        mounts.push(CgroupMount {
            fs,
            mount_point: unescape_mount_field(fields[1]),
            options: fields[3].split(',').map(str::to_string).collect(),
        });
    }
    Ok(mounts)
}

/// The kernel writes space, tab, newline and backslash in mount fields as
/// three-digit octal escapes (`\040`); anything else is kept verbatim.
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\' && index + 3 < bytes.len() {
            let digits = &bytes[index + 1..index + 4];
            if digits.iter().all(|digit| (b'0'..=b'7').contains(digit)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, digit| acc * 8 + u32::from(digit - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    index += 4;
                    continue;
                }
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a cgroup v2 `cgroup.controllers` or `cgroup.subtree_control` file.
pub fn parse_controller_list(text: &str) -> Result<BTreeSet<String>, ParseError> {
    const WHAT: &str = "cgroup.controllers";
    let mut controllers = BTreeSet::new();
    for name in text.split_whitespace() {
        if !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(ParseError::new(WHAT, "invalid controller name", name));
        }
        controllers.insert(name.to_string());
    }
    Ok(controllers)
}

/// Parses a kernel CPU or node list such as `0-3,8,10-11` with the shared
/// [`CpuSet`](koord_common::units::CpuSet) parser. An empty file is an empty set.
pub fn parse_cpu_list(text: &str) -> Result<BTreeSet<u32>, ParseError> {
    text.parse::<koord_common::units::CpuSet>()
        .map(|set| set.iter().collect())
        .map_err(|error| ParseError::new("cpu list", error.to_string(), text.trim()))
}

/// Parses a file holding one integer (e.g. `topology/core_id`, `num_closids`).
pub fn parse_integer(what: &'static str, text: &str) -> Result<i64, ParseError> {
    let value = text.trim();
    value
        .parse::<i64>()
        .map_err(|_| ParseError::new(what, "not an integer", value))
}

/// A kernel release string split into its numeric version and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRelease {
    pub release: String,
    pub major: u32,
    pub minor: u32,
    /// Missing in releases such as `6.9-rc1`.
    pub patch: Option<u32>,
}

/// Parses `/proc/sys/kernel/osrelease` (e.g. `5.10.134-13.an8.x86_64`).
pub fn parse_osrelease(text: &str) -> Result<KernelRelease, ParseError> {
    const WHAT: &str = "kernel osrelease";
    let release = text.trim();
    if release.is_empty() || release.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ParseError::new(
            WHAT,
            "expected one word such as 6.1.0-13-amd64",
            release,
        ));
    }
    let numeric_end = release
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(release.len());
    let mut numbers = release[..numeric_end].split('.').filter(|p| !p.is_empty());
    let mut next_number = |name: &str| -> Result<Option<u32>, ParseError> {
        numbers
            .next()
            .map(|part| {
                part.parse::<u32>().map_err(|_| {
                    ParseError::new(WHAT, format!("{name} version is not a number"), release)
                })
            })
            .transpose()
    };
    let major = next_number("major")?
        .ok_or_else(|| ParseError::new(WHAT, "does not start with a version number", release))?;
    let minor =
        next_number("minor")?.ok_or_else(|| ParseError::new(WHAT, "no minor version", release))?;
    let patch = next_number("patch")?;
    Ok(KernelRelease {
        release: release.to_string(),
        major,
        minor,
        patch,
    })
}

/// Checks a PSI file (`/proc/pressure/*`, `<cgroup>/*.pressure`) with the
/// collectors' parser, so detection and collection agree on what is valid.
pub fn validate_psi(text: &str) -> Result<(), ParseError> {
    crate::metricsadvisor::parse::parse_psi(text)
        .map(|_| ())
        .map_err(|error| ParseError::new("PSI file", error.to_string(), text))
}

/// Parses resctrl's `info/L3/cbm_mask` (hex bit mask of usable cache ways).
pub fn parse_cbm_mask(text: &str) -> Result<u64, ParseError> {
    const WHAT: &str = "resctrl cbm_mask";
    let value = text.trim();
    let mask = u64::from_str_radix(value, 16)
        .map_err(|_| ParseError::new(WHAT, "not a hexadecimal mask", value))?;
    if mask == 0 {
        return Err(ParseError::new(WHAT, "empty mask", value));
    }
    Ok(mask)
}

/// Parses resctrl's `info/<resource>/num_closids`: a positive count.
pub fn parse_num_closids(text: &str) -> Result<u32, ParseError> {
    const WHAT: &str = "resctrl num_closids";
    let value = text.trim();
    value
        .parse::<u32>()
        .ok()
        .filter(|count| *count > 0)
        .ok_or_else(|| ParseError::new(WHAT, "not a positive count", value))
}

/// Value of the kubelet's `cgroupDriver` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeletCgroupDriver {
    Systemd,
    Cgroupfs,
    /// The field is absent; the kubelet then uses `cgroupfs`.
    Defaulted,
}

/// Reads `cgroupDriver` from a KubeletConfiguration file (YAML or JSON).
pub fn parse_kubelet_cgroup_driver(text: &str) -> Result<KubeletCgroupDriver, ParseError> {
    const WHAT: &str = "kubelet config";
    let document: serde_json::Value = apis::yaml::from_str(text, &apis::yaml::Limits::CONFIG)
        .map_err(|err| ParseError::new(WHAT, err.to_string(), ""))?;
    let serde_json::Value::Object(mapping) = document else {
        return Err(ParseError::new(WHAT, "top level is not a mapping", ""));
    };
    match mapping.get("cgroupDriver") {
        None | Some(serde_json::Value::Null) => Ok(KubeletCgroupDriver::Defaulted),
        Some(serde_json::Value::String(driver)) => match driver.as_str() {
            "systemd" => Ok(KubeletCgroupDriver::Systemd),
            "cgroupfs" => Ok(KubeletCgroupDriver::Cgroupfs),
            other => Err(ParseError::new(
                WHAT,
                "cgroupDriver must be systemd or cgroupfs",
                other,
            )),
        },
        Some(_) => Err(ParseError::new(WHAT, "cgroupDriver is not a string", "")),
    }
}

/// `/proc/filesystems` lists `resctrl` when the kernel can mount it.
pub fn filesystems_include(text: &str, fs: &str) -> bool {
    text.lines()
        .any(|line| line.split_whitespace().last() == Some(fs))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_CGROUPS_V1: &str = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
        cpuset\t3\t1\t1\ncpu\t1\t1\t1\ncpuacct\t2\t1\t1\nblkio\t7\t1\t1\n\
        memory\t4\t37\t1\ndevices\t5\t1\t1\nnet_cls\t0\t1\t1\nhugetlb\t0\t1\t0\n";

    #[test]
    fn proc_cgroups_rows_are_parsed() {
        let rows = parse_proc_cgroups(PROC_CGROUPS_V1).unwrap();
        assert_eq!(rows.len(), 8);
        assert_eq!(
            rows[4],
            CgroupSubsystem {
                name: "memory".into(),
                hierarchy: 4,
                num_cgroups: 37,
                enabled: true
            }
        );
        assert!(!rows[7].enabled);
        assert_eq!(rows[6].hierarchy, 0);
    }

    #[test]
    fn malformed_proc_cgroups_is_an_error() {
        for bad in [
            "cpu 1 1",
            "cpu x 1 1",
            "cpu 1 1 2",
            "cpu 1 -1 1",
            "cpu 99999999999 1 1",
        ] {
            let err = parse_proc_cgroups(bad).unwrap_err();
            assert_eq!(err.what, "/proc/cgroups", "{bad}");
        }
        assert_eq!(parse_proc_cgroups("").unwrap(), vec![]);
    }

    const MOUNTINFO_V1: &str = "\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:7 - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
";

    const MOUNTINFO_HYBRID: &str = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
";

    const MOUNTINFO_V2: &str = "\
25 20 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
26 20 0:23 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:5 - pstore pstore rw
";

    #[test]
    fn mountinfo_v1_lists_cgroup_mounts_with_controllers() {
        let mounts = parse_mountinfo(MOUNTINFO_V1).unwrap();
        assert_eq!(mounts.len(), 4);
        assert_eq!(mounts[0].fs, CgroupFs::V1);
        assert_eq!(mounts[0].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
        assert!(mounts[0].options.contains(&"cpuacct".to_string()));
        assert!(mounts[3].options.contains(&"name=systemd".to_string()));
    }

    #[test]
    fn mountinfo_hybrid_and_v2() {
        let hybrid = parse_mountinfo(MOUNTINFO_HYBRID).unwrap();
        assert_eq!(
            hybrid.iter().map(|m| m.fs).collect::<Vec<_>>(),
            vec![CgroupFs::V1, CgroupFs::V2]
        );
        assert_eq!(hybrid[1].mount_point, "/sys/fs/cgroup/unified");
        let v2 = parse_mountinfo(MOUNTINFO_V2).unwrap();
        assert_eq!(v2.len(), 1);
        assert_eq!(v2[0].fs, CgroupFs::V2);
        assert_eq!(v2[0].mount_point, "/sys/fs/cgroup");
    }

    #[test]
    fn mountinfo_decodes_escaped_mount_points() {
        let text = "50 31 0:40 / /mnt/my\\040cgroups\\134x rw - cgroup2 cgroup2 rw\n";
        let mounts = parse_mountinfo(text).unwrap();
        assert_eq!(mounts[0].mount_point, "/mnt/my cgroups\\x");
        // A lone backslash or a non-octal escape stays as it is.
        assert_eq!(unescape_mount_field("a\\9zz\\"), "a\\9zz\\");
        assert_eq!(unescape_mount_field("\\04"), "\\04");
    }

    #[test]
    fn malformed_mountinfo_is_an_error() {
        for bad in [
            "31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs rw",
            "31 23 - cgroup cgroup rw",
            "31 23 0:28 / /x rw - cgroup",
        ] {
            assert_eq!(parse_mountinfo(bad).unwrap_err().what, "mountinfo", "{bad}");
        }
    }

    #[test]
    fn proc_mounts_lists_cgroup_mounts() {
        let text = "proc /proc proc rw 0 0\n\
            cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,relatime,memory 0 0\n\
            cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nsdelegate 0 0\n";
        let mounts = parse_proc_mounts(text).unwrap();
        assert_eq!(mounts.len(), 2);
        assert!(mounts[0].options.contains(&"memory".to_string()));
        assert_eq!(mounts[1].fs, CgroupFs::V2);
        assert!(parse_proc_mounts("cgroup /x").is_err());
    }

    #[test]
    fn controller_lists() {
        let names = parse_controller_list("cpuset cpu io memory hugetlb pids rdma misc\n").unwrap();
        assert_eq!(names.len(), 8);
        assert!(names.contains("io"));
        assert!(parse_controller_list("").unwrap().is_empty());
        assert!(parse_controller_list("cpu m€m").is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n")
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("0").unwrap().len(), 1);
        assert!(parse_cpu_list("\n").unwrap().is_empty());
        for bad in ["3-1", "a", "0-", "1,,2", "0-99999999", "-1"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topology_integers() {
        assert_eq!(parse_integer("core_id", "7\n").unwrap(), 7);
        assert_eq!(parse_integer("physical_package_id", "-1").unwrap(), -1);
        assert!(parse_integer("core_id", "seven").is_err());
        assert!(parse_integer("core_id", "").is_err());
    }

    #[test]
    fn osrelease_versions() {
        let release = parse_osrelease("6.18.44-fc-v669\n").unwrap();
        assert_eq!(
            (release.major, release.minor, release.patch),
            (6, 18, Some(44))
        );
        assert_eq!(release.release, "6.18.44-fc-v669");
        let anolis = parse_osrelease("5.10.134-13.an8.x86_64").unwrap();
        assert_eq!(
            (anolis.major, anolis.minor, anolis.patch),
            (5, 10, Some(134))
        );
        let rc = parse_osrelease("6.9-rc1").unwrap();
        assert_eq!((rc.major, rc.minor, rc.patch), (6, 9, None));
        for bad in [
            "",
            "  \n",
            "linux",
            "6",
            "6.x",
            "6.1 extra",
            "99999999999.1",
        ] {
            assert!(parse_osrelease(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn psi_files() {
        let cpu = "some avg10=0.00 avg60=1.50 avg300=0.00 total=12345\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        validate_psi(cpu).unwrap();
        validate_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0").unwrap();
        for bad in [
            "",
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0",
            "some avg10=x avg60=0.00 avg300=0.00 total=0",
            "some avg10=0.00 avg60=0.00 total=0",
            "some avg10 avg60=0.00 avg300=0.00 total=0",
            "partial avg10=0.00 avg60=0.00 avg300=0.00 total=0",
        ] {
            assert!(validate_psi(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn resctrl_info_files() {
        assert_eq!(parse_cbm_mask("fff\n").unwrap(), 0xfff);
        assert_eq!(parse_cbm_mask("7ff").unwrap().count_ones(), 11);
        for bad in ["", "0", "xyz", "fffffffffffffffffff"] {
            assert!(parse_cbm_mask(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_num_closids("16\n").unwrap(), 16);
        for bad in ["", "0", "-4", "sixteen"] {
            assert!(parse_num_closids(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn kubelet_config_driver() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n";
        assert_eq!(
            parse_kubelet_cgroup_driver(yaml).unwrap(),
            KubeletCgroupDriver::Systemd
        );
        let json = r#"{"kind":"KubeletConfiguration","cgroupDriver":"cgroupfs"}"#;
        assert_eq!(
            parse_kubelet_cgroup_driver(json).unwrap(),
            KubeletCgroupDriver::Cgroupfs
        );
        assert_eq!(
            parse_kubelet_cgroup_driver("kind: KubeletConfiguration\n").unwrap(),
            KubeletCgroupDriver::Defaulted
        );
        for bad in [
            "cgroupDriver: docker",
            "cgroupDriver: [1]",
            "- a\n- b",
            "{{{",
        ] {
            assert!(parse_kubelet_cgroup_driver(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn filesystems_listing() {
        let text = "nodev\tsysfs\nnodev\tcgroup2\n\text4\nnodev\tresctrl\n";
        assert!(filesystems_include(text, "resctrl"));
        assert!(filesystems_include(text, "ext4"));
        assert!(!filesystems_include(text, "btrfs"));
    }

    #[test]
    fn long_content_is_cut_in_errors() {
        let long = "x".repeat(500);
        let err = parse_osrelease(&format!("6.1 {long}")).unwrap_err();
        assert!(err.content.chars().count() <= 121);
    }
}
