//! Command-line helpers: the version string and Go-style flag spelling.

use std::ffi::OsString;
use std::sync::OnceLock;

/// Build-time variable a packaging step may set to the source commit.
pub const GIT_COMMIT_ENV: &str = "KOORD_GIT_COMMIT";

/// The git commit recorded at build time, when the build set [`GIT_COMMIT_ENV`].
pub fn git_commit() -> Option<&'static str> {
    option_env!("KOORD_GIT_COMMIT").filter(|commit| !commit.trim().is_empty())
}

/// Version shown by `--version`: the crate version, plus the commit when known.
pub fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| match git_commit() {
        Some(commit) => format!("{} (git {})", env!("CARGO_PKG_VERSION"), commit.trim()),
        None => env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// `--version` as component-base's verflag takes it (kube-scheduler's and the
/// descheduler's flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRequest {
    /// `--version` or `--version=true`: print the version and exit.
    Print,
    /// `--version=raw`: print the version details and exit.
    Raw,
    /// `--version=false`: run as usual.
    No,
    /// `--version=vX.Y.Z`: upstream reports that version; ignored here.
    Override(String),
}

/// Parses a `--version` value.
pub fn parse_version_request(text: &str) -> Result<VersionRequest, String> {
    if text == "raw" {
        return Ok(VersionRequest::Raw);
    }
    if text.starts_with('v') {
        return Ok(VersionRequest::Override(text.to_string()));
    }
    parse_go_bool_flag(text)
        .map(|print| {
            if print {
                VersionRequest::Print
            } else {
                VersionRequest::No
            }
        })
        .map_err(|_| format!("{text:?}: use true, false, raw or vX.Y.Z"))
}

impl VersionRequest {
    /// What `component` prints before exiting, if anything.
    pub fn output(&self, component: &str) -> Option<String> {
        match self {
            VersionRequest::Print => Some(format!("{component} {}", version())),
            VersionRequest::Raw => Some(format!(
                "{component} version={} gitCommit={}",
                env!("CARGO_PKG_VERSION"),
                git_commit().unwrap_or("unknown")
            )),
            VersionRequest::No | VersionRequest::Override(_) => None,
        }
    }
}

/// Rewrites Go `flag`-package spellings (`-addr=:9316`) to the `--addr=:9316`
/// form clap expects, so upstream manifests keep working. Single-letter flags,
/// negative numbers and everything after `--` are left alone.
pub fn normalize_go_flag_args<I>(args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = OsString>,
{
    let mut out = Vec::new();
    let mut options_ended = false;
    for (index, arg) in args.into_iter().enumerate() {
        if index == 0 || options_ended {
            out.push(arg);
            continue;
        }
        if arg == "--" {
            options_ended = true;
            out.push(arg);
            continue;
        }
        out.push(match arg.to_str() {
            Some(text) if is_go_long_flag(text) => OsString::from(format!("-{text}")),
            _ => arg,
        });
    }
    out
}

/// The process arguments with [`normalize_go_flag_args`] applied.
pub fn go_style_args() -> Vec<OsString> {
    normalize_go_flag_args(std::env::args_os())
}

fn is_go_long_flag(arg: &str) -> bool {
    let Some(rest) = arg.strip_prefix('-') else {
        return false;
    };
    if rest.starts_with('-') {
        return false;
    }
    let name = rest.split_once('=').map_or(rest, |(name, _)| name);
    name.len() > 1 && name.starts_with(|c: char| c.is_ascii_alphabetic())
}

/// Value parser of bool flags: Go's `strconv.ParseBool` spellings, which upstream's bool flags
/// take (`1`, `t`, `T`, `true`, `TRUE`, `True` and their false counterparts).
pub fn parse_go_bool_flag(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!(
            "invalid boolean value {text:?}: expected true, false, 1, 0, t, f, T, F, TRUE, FALSE, True or False"
        )),
    }
}

/// An upstream flag that this binary accepts but does not act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InertFlag {
    /// The name without dashes, as upstream registers it.
    pub name: &'static str,
    /// Whether the flag takes a value (Go's non-bool flags); bool flags take none or `=value`.
    pub takes_value: bool,
    /// Why it has no effect here, for the warning at start.
    pub reason: &'static str,
}

/// Arguments with the [`InertFlag`]s taken out, and one warning per inert flag given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InertFlagsRemoved {
    pub args: Vec<OsString>,
    pub warnings: Vec<String>,
}

/// Takes the inert flags (`--name`, `--name=value`, and `--name value` for flags that take a
/// value) out of `args`, already normalized by [`normalize_go_flag_args`], so that clap never
/// sees them; the warnings name each one once, with its reason. A value-taking inert flag at the
/// end without its value is left in place for clap to report.
pub fn remove_inert_flags(args: Vec<OsString>, inert: &[InertFlag]) -> InertFlagsRemoved {
    let mut out = InertFlagsRemoved::default();
    let mut warned: Vec<&str> = Vec::new();
    let mut options_ended = false;
    let mut iter = args.into_iter().enumerate();
    while let Some((index, arg)) = iter.next() {
        let flag = (!options_ended && index > 0)
            .then(|| arg.to_str())
            .flatten()
            .and_then(|text| text.strip_prefix("--"))
            .and_then(|rest| {
                let (name, value) = match rest.split_once('=') {
                    Some((name, value)) => (name, Some(value)),
                    None => (rest, None),
                };
                inert
                    .iter()
                    .find(|flag| flag.name == name)
                    .map(|flag| (flag, value.is_some()))
            });
        if arg == "--" {
            options_ended = true;
        }
        let Some((flag, has_inline_value)) = flag else {
            out.args.push(arg);
            continue;
        };
        // As Go's flag package, the next argument is the value even when it starts with '-'.
        if flag.takes_value && !has_inline_value && iter.next().is_none() {
            out.args.push(arg);
            continue;
        }
        if !warned.contains(&flag.name) {
            warned.push(flag.name);
            out.warnings.push(format!(
                "flag -{} is accepted for compatibility with upstream Koordinator and has no effect here: {}",
                flag.name, flag.reason
            ));
        }
    }
    out
}

/// The long names (and aliases) of `command`'s flags whose value may follow as the next
/// argument (they take a value and do not require `=`), plus the value-taking `inert` flags.
pub fn separate_value_flags(command: &clap::Command, inert: &[InertFlag]) -> Vec<String> {
    let ours = command
        .get_arguments()
        .filter(|arg| arg.get_action().takes_values() && !arg.is_require_equals_set())
        .flat_map(|arg| {
            arg.get_long()
                .into_iter()
                .chain(arg.get_all_aliases().unwrap_or_default())
        });
    let inert = inert
        .iter()
        .filter(|flag| flag.takes_value)
        .map(|flag| flag.name);
    ours.chain(inert).map(str::to_string).collect()
}

/// Go takes the argument after a flag that needs a value as that value, even when it starts
/// with '-' (`-controllers -noderesource`); such pairs become `--flag=value` here, so that
/// neither [`normalize_go_flag_args`] nor clap reads the value as a flag. `value_flags` are
/// long names without dashes ([`separate_value_flags`]); a flag at the end keeps its missing
/// value for clap to report.
pub fn join_separate_values(args: Vec<OsString>, value_flags: &[String]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut options_ended = false;
    let mut iter = args.into_iter().enumerate();
    while let Some((index, arg)) = iter.next() {
        if arg == "--" {
            options_ended = true;
        }
        let takes_next = index > 0
            && !options_ended
            && arg.to_str().is_some_and(|text| {
                let name = text.strip_prefix("--").or_else(|| text.strip_prefix('-'));
                name.is_some_and(|name| value_flags.iter().any(|flag| flag == name))
            });
        match takes_next.then(|| iter.next()).flatten() {
            Some((_, value)) => {
                let mut joined = OsString::from("--");
                joined.push(
                    arg.to_str()
                        .map(|text| text.trim_start_matches('-'))
                        .unwrap_or_default(),
                );
                joined.push("=");
                joined.push(value);
                out.push(joined);
            }
            None => out.push(arg),
        }
    }
    out
}

/// Upstream's command line made ready for clap: separate values joined
/// ([`join_separate_values`]), Go spellings normalized ([`normalize_go_flag_args`]) and the
/// inert flags taken out with their warnings ([`remove_inert_flags`]).
pub fn prepare_go_args(
    command: &clap::Command,
    args: Vec<OsString>,
    inert: &[InertFlag],
) -> InertFlagsRemoved {
    let joined = join_separate_values(args, &separate_value_flags(command, inert));
    remove_inert_flags(normalize_go_flag_args(joined), inert)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalize(args: &[&str]) -> Vec<String> {
        normalize_go_flag_args(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn single_dash_long_flags_gain_a_dash() {
        assert_eq!(
            normalize(&[
                "koordlet",
                "-addr=:9316",
                "-runtime-hooks-network",
                "unix",
                "--v=4"
            ]),
            [
                "koordlet",
                "--addr=:9316",
                "--runtime-hooks-network",
                "unix",
                "--v=4"
            ]
        );
    }

    #[test]
    fn short_flags_numbers_and_positionals_are_untouched() {
        assert_eq!(
            normalize(&[
                "bin", "-v=4", "-V", "-1", "-10", "plain", "-", "--", "-addr"
            ]),
            [
                "bin", "-v=4", "-V", "-1", "-10", "plain", "-", "--", "-addr"
            ]
        );
    }

    const INERT: &[InertFlag] = &[
        InertFlag {
            name: "tsdb-path",
            takes_value: true,
            reason: "metrics are kept in memory",
        },
        InertFlag {
            name: "enable-pod-taskids",
            takes_value: false,
            reason: "not collected",
        },
    ];

    fn remove(args: &[&str]) -> InertFlagsRemoved {
        let normalized = normalize_go_flag_args(args.iter().map(OsString::from));
        remove_inert_flags(normalized, INERT)
    }

    fn strings(args: &[OsString]) -> Vec<&str> {
        args.iter().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn inert_flags_are_taken_out_in_every_go_spelling_with_one_warning_each() {
        let removed = remove(&[
            "koordlet",
            "-tsdb-path=/a",
            "--addr=:1",
            "-tsdb-path",
            "/b",
            "--enable-pod-taskids",
            "-enable-pod-taskids=false",
            "-v=4",
        ]);
        assert_eq!(strings(&removed.args), ["koordlet", "--addr=:1", "-v=4"]);
        assert_eq!(removed.warnings.len(), 2, "{:?}", removed.warnings);
        assert!(removed.warnings[0].contains("-tsdb-path"));
        assert!(removed.warnings[0].contains("metrics are kept in memory"));
        assert!(removed.warnings[1].contains("-enable-pod-taskids"));
    }

    #[test]
    fn a_bool_inert_flag_does_not_swallow_the_next_argument_and_a_dangling_value_flag_stays() {
        let removed = remove(&[
            "koordlet",
            "--enable-pod-taskids",
            "--addr=:1",
            "--tsdb-path",
        ]);
        assert_eq!(
            strings(&removed.args),
            ["koordlet", "--addr=:1", "--tsdb-path"]
        );
        let after_end = remove(&["koordlet", "--", "--tsdb-path=/a"]);
        assert_eq!(
            strings(&after_end.args),
            ["koordlet", "--", "--tsdb-path=/a"]
        );
        assert!(after_end.warnings.is_empty());
        // A flag that merely starts with an inert name is not inert.
        let longer = remove(&["koordlet", "--tsdb-path-extra=1"]);
        assert_eq!(strings(&longer.args), ["koordlet", "--tsdb-path-extra=1"]);
    }

    #[test]
    fn program_name_is_never_rewritten() {
        assert_eq!(normalize(&["-weird-name"]), ["-weird-name"]);
    }

    #[test]
    fn version_starts_with_the_package_version() {
        assert!(version().starts_with(env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn a_separate_value_starting_with_a_dash_stays_the_value() {
        let command = clap::Command::new("demo")
            .arg(clap::Arg::new("controllers").long("controllers"))
            .arg(
                clap::Arg::new("enabled")
                    .long("enabled")
                    .num_args(0..=1)
                    .require_equals(true),
            );
        let inert = [InertFlag {
            name: "pprof-addr",
            takes_value: true,
            reason: "none",
        }];
        let flags = separate_value_flags(&command, &inert);
        assert_eq!(flags, vec!["controllers", "pprof-addr"]);
        let prepared = prepare_go_args(
            &command,
            [
                "demo",
                "-controllers",
                "-noderesource",
                "-enabled",
                "-pprof-addr",
                "-x",
                "--controllers",
            ]
            .into_iter()
            .map(OsString::from)
            .collect(),
            &inert,
        );
        assert_eq!(
            strings(&prepared.args),
            vec![
                "demo",
                "--controllers=-noderesource",
                "--enabled",
                "--controllers"
            ]
        );
        assert_eq!(prepared.warnings.len(), 1);
        // Without the join, the value would have become a flag of its own.
        assert_eq!(
            normalize(&["demo", "-controllers", "-noderesource"]),
            vec!["demo", "--controllers", "--noderesource"]
        );
    }
}
