//! What the node's resctrl root offers ([`ResctrlNodeInfo`], read once at
//! start) and how koordlet names and fills its groups: pure arithmetic from
//! a pod's resctrl config to schemata lines. Used by the rules (which carry
//! the node info), the Resctrl hook and the side-effect applier.

use apis::extension::ResctrlConfig;

/// Prefix of the groups koordlet owns (upstream's).
pub const GROUP_PREFIX: &str = "koordlet-";

/// What the resctrl root offers: the L3 CBM mask and the cache ids of each
/// schemata resource (read once from the root's `schemata` and
/// `info/L3/cbm_mask`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResctrlNodeInfo {
    pub cbm_mask: u64,
    pub l3_ids: Vec<u32>,
    pub mb_ids: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resctrl {path}: {reason}")]
pub struct ResctrlInfoError {
    pub path: String,
    pub reason: String,
}

impl ResctrlNodeInfo {
    /// Parses the root `schemata` (`L3:0=7ff;1=7ff`, `MB:0=100;1=100`) and
    /// the `cbm_mask` file content.
    pub fn parse(schemata: &str, cbm_mask: &str) -> Result<Self, ResctrlInfoError> {
        let cbm_mask = u64::from_str_radix(cbm_mask.trim(), 16).map_err(|_| ResctrlInfoError {
            path: "info/L3/cbm_mask".into(),
            reason: format!("{:?} is not a hex mask", cbm_mask.trim()),
        })?;
        let mut info = ResctrlNodeInfo {
            cbm_mask,
            ..Self::default()
        };
        for line in schemata.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let Some((resource, domains)) = line.split_once(':') else {
                return Err(ResctrlInfoError {
                    path: "schemata".into(),
                    reason: format!("line {line:?} has no ':'"),
                });
            };
            let mut ids = Vec::new();
            for domain in domains.split(';').filter(|d| !d.trim().is_empty()) {
                let id = domain
                    .split_once('=')
                    .and_then(|(id, _)| id.trim().parse::<u32>().ok())
                    .ok_or_else(|| ResctrlInfoError {
                        path: "schemata".into(),
                        reason: format!("domain {domain:?} is not <id>=<value>"),
                    })?;
                ids.push(id);
            }
            match resource.trim() {
                "L3" => info.l3_ids = ids,
                "MB" => info.mb_ids = ids,
                _ => {}
            }
        }
        Ok(info)
    }

    /// Reads the info from a resctrl root.
    pub fn read(root: &std::path::Path) -> Result<Self, ResctrlInfoError> {
        let read = |relative: &str| {
            std::fs::read_to_string(root.join(relative)).map_err(|error| ResctrlInfoError {
                path: root.join(relative).display().to_string(),
                reason: error.to_string(),
            })
        };
        Self::parse(&read("schemata")?, &read("info/L3/cbm_mask")?)
    }
}

/// The L3 mask for `[start%, end%)` of the ways in `cbm_mask` (hex), or
/// `None` when the mask or the range is invalid.
pub fn l3_mask(cbm_mask: u64, start_percent: i64, end_percent: i64) -> Option<String> {
    // A root CBM is all ones from bit 0 (the kernel may report all 64).
    let contiguous = cbm_mask
        .checked_add(1)
        .is_none_or(|next| cbm_mask & next == 0);
    if cbm_mask == 0 || !contiguous {
        return None;
    }
    if start_percent < 0 || end_percent > 100 || end_percent <= start_percent {
        return None;
    }
    // ways <= 64 and percents <= 100: the products fit easily.
    let ways = u64::from(64 - cbm_mask.leading_zeros());
    let start = (ways * start_percent.unsigned_abs()).div_ceil(100);
    let end = (ways * end_percent.unsigned_abs()).div_ceil(100);
    let mask = low_bits(end) & !low_bits(start);
    (mask != 0).then(|| format!("{mask:x}"))
}

/// The lowest `count` bits set (all 64 for `count >= 64`).
fn low_bits(count: u64) -> u64 {
    match u32::try_from(count) {
        Ok(count) if count < u64::BITS => (1u64 << count) - 1,
        _ => u64::MAX,
    }
}

/// Schemata lines for a pod's config on this node.
pub fn schemata_lines(config: &ResctrlConfig, info: &ResctrlNodeInfo) -> Vec<String> {
    let mut lines = Vec::new();
    let mut l3: Vec<(u32, String)> = Vec::new();
    if let [start, end] = config.llc.schemata.range[..]
        && let Some(mask) = l3_mask(info.cbm_mask, i64::from(start), i64::from(end))
    {
        l3 = info.l3_ids.iter().map(|id| (*id, mask.clone())).collect();
    }
    for per_cache in &config.llc.schemata_per_cache {
        if let [start, end] = per_cache.schemata.range[..]
            && let (Ok(id), Some(mask)) = (
                u32::try_from(per_cache.cache_id),
                l3_mask(info.cbm_mask, i64::from(start), i64::from(end)),
            )
        {
            match l3.iter_mut().find(|(existing, _)| *existing == id) {
                Some(entry) => entry.1 = mask,
                None => l3.push((id, mask)),
            }
        }
    }
    if !l3.is_empty() {
        let domains: Vec<String> = l3.iter().map(|(id, mask)| format!("{id}={mask}")).collect();
        lines.push(format!("L3:{}", domains.join(";")));
    }
    let round = |percent: i32| -> i64 { (i64::from(percent).clamp(1, 100) + 9) / 10 * 10 };
    let mut mb: Vec<(u32, i64)> = Vec::new();
    if config.mb.schemata.percent > 0 {
        mb = info
            .mb_ids
            .iter()
            .map(|id| (*id, round(config.mb.schemata.percent)))
            .collect();
    }
    for per_cache in &config.mb.schemata_per_cache {
        if let Ok(id) = u32::try_from(per_cache.cache_id)
            && per_cache.schemata.percent > 0
        {
            let value = round(per_cache.schemata.percent);
            match mb.iter_mut().find(|(existing, _)| *existing == id) {
                Some(entry) => entry.1 = value,
                None => mb.push((id, value)),
            }
        }
    }
    if !mb.is_empty() {
        let domains: Vec<String> = mb.iter().map(|(id, v)| format!("{id}={v}")).collect();
        lines.push(format!("MB:{}", domains.join(";")));
    }
    lines
}

/// The group of a pod.
pub fn group_of(pod_uid: &str) -> String {
    format!("{GROUP_PREFIX}{pod_uid}")
}

/// Whether `group` is usable as a directory name below the resctrl root
/// (and as a runtime RDT class): ASCII letters, digits, `-`, `_`, `.`, not
/// `.`/`..`.
pub fn is_group_name(group: &str) -> bool {
    !group.is_empty()
        && group != "."
        && group != ".."
        && group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}
