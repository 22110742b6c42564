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

    #[test]
    fn program_name_is_never_rewritten() {
        assert_eq!(normalize(&["-weird-name"]), ["-weird-name"]);
    }

    #[test]
    fn version_starts_with_the_package_version() {
        assert!(version().starts_with(env!("CARGO_PKG_VERSION")));
    }
}
