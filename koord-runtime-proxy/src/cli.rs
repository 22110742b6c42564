//! The command line: every flag upstream's koord-runtime-proxy accepts
//! (`cmd/koord-runtime-proxy`) parses here, in Go's spellings, through the
//! same pipeline as the other binaries: Go's single-dash spelling gets its
//! second dash, inert flags are taken out, clap parses the rest.

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches};
use koord_common::cli::{InertFlag, prepare_go_args};

use crate::args::RuntimeProxyArgs;

/// Upstream flags accepted without effect: none. Upstream's proxy has five
/// flags (`--koord-runtimeproxy-endpoint`, `--remote-runtime-service-endpoint`,
/// `--backend-runtime-mode`, `--runtime-hook-server-key`,
/// `--runtime-hook-server-val`) and earlier releases a sixth
/// (`--remote-image-service-endpoint`); all are honoured, see `docs/proxy.md`.
pub const INERT_FLAGS: &[InertFlag] = &[];

/// Parsed flags and the warnings to log once logging is up.
#[derive(Debug)]
pub struct ParsedArgs {
    pub args: RuntimeProxyArgs,
    pub warnings: Vec<String>,
}

/// The clap command, with Go's rules for repeated flags and bools.
pub fn command() -> clap::Command {
    RuntimeProxyArgs::command()
        // As Go's flag packages: a repeated flag's last value wins.
        .args_override_self(true)
        // A bool: a following word is never its value.
        .mut_arg("logtostderr", |arg| arg.require_equals(true))
}

/// Parses the process arguments (program name first) the way upstream's
/// binary accepts them.
pub fn parse_args<I, T>(args: I) -> Result<ParsedArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut command = command();
    let removed = prepare_go_args(
        &command,
        args.into_iter().map(Into::into).collect(),
        INERT_FLAGS,
    );
    let mut matches = command.try_get_matches_from_mut(removed.args)?;
    let args = RuntimeProxyArgs::from_arg_matches_mut(&mut matches)
        .map_err(|err| err.format(&mut command))?;
    Ok(ParsedArgs {
        args,
        warnings: removed.warnings,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::error::ErrorKind;

    use super::*;
    use crate::BackendRuntimeMode;

    type Check = fn(&RuntimeProxyArgs) -> bool;

    /// Every flag of upstream's koord-runtime-proxy, with a plausible value
    /// and how to see it arrived. All take a value (upstream has no bool flag).
    const UPSTREAM_FLAGS: &[(&str, &str, Check)] = &[
        (
            "koord-runtimeproxy-endpoint",
            "/run/koord/proxy.sock",
            |a| a.runtime_proxy_endpoint.path() == Path::new("/run/koord/proxy.sock"),
        ),
        (
            "remote-runtime-service-endpoint",
            "/run/containerd/containerd.sock",
            |a| {
                a.remote_runtime_service_endpoint.path()
                    == Path::new("/run/containerd/containerd.sock")
            },
        ),
        ("backend-runtime-mode", "Docker", |a| {
            a.backend_runtime_mode == BackendRuntimeMode::Docker
        }),
        ("runtime-hook-server-key", "example.com/skip", |a| {
            a.runtime_hook_server_key == "example.com/skip"
        }),
        ("runtime-hook-server-val", "yes", |a| {
            a.runtime_hook_server_val == "yes"
        }),
        // Removed upstream in #1593; earlier manifests and upstream's docs pass it.
        (
            "remote-image-service-endpoint",
            "/run/containerd/image.sock",
            |a| {
                a.remote_image_service_endpoint
                    .as_ref()
                    .is_some_and(|e| e.path() == Path::new("/run/containerd/image.sock"))
            },
        ),
    ];

    fn parse(args: &[&str]) -> Result<ParsedArgs, clap::Error> {
        parse_args(std::iter::once("koord-runtime-proxy").chain(args.iter().copied()))
    }

    #[test]
    fn upstream_documented_command_lines_parse() {
        // Upstream's setup commands (docs/design-archive/koord-runtime-proxy-design-doc.md,
        // "Setup KoordRuntimeProxy"), with the socket paths filled in; upstream's chart has none.
        let containerd = parse(&[
            "--remote-runtime-service-endpoint=/var/run/containerd/containerd.sock",
            "--remote-image-service-endpoint=/var/run/containerd/containerd.sock",
        ])
        .unwrap();
        assert!(containerd.warnings.is_empty());
        assert_eq!(
            containerd.args.remote_runtime_service_endpoint.path(),
            Path::new("/var/run/containerd/containerd.sock")
        );
        let bare = parse(&[]).unwrap();
        assert_eq!(
            bare.args.runtime_proxy_endpoint.path(),
            Path::new(crate::DEFAULT_RUNTIME_PROXY_ENDPOINT)
        );
        let docker = parse(&[
            "--backend-runtime-mode=Docker",
            "--remote-runtime-service-endpoint=/var/run/docker.sock",
        ])
        .unwrap();
        assert_eq!(docker.args.backend_runtime_mode, BackendRuntimeMode::Docker);
        // The "--backend-runtime-mode Docker" spelling of the same page.
        let spaced = parse(&["--backend-runtime-mode", "Docker"]).unwrap();
        assert_eq!(spaced.args.backend_runtime_mode, BackendRuntimeMode::Docker);
    }

    #[test]
    fn our_systemd_unit_command_line_parses() {
        let unit = include_str!("../docs/koord-runtime-proxy.service");
        let exec = unit
            .lines()
            .skip_while(|line| !line.starts_with("ExecStart="))
            .take_while(|line| !line.trim().is_empty() && !line.starts_with("Restart"))
            .collect::<Vec<_>>()
            .join(" ");
        let argv: Vec<&str> = exec
            .trim_start_matches("ExecStart=")
            .split_whitespace()
            .filter(|word| *word != "\\")
            .collect();
        assert!(argv.len() > 3, "{argv:?}");
        let parsed = parse_args(argv).unwrap();
        assert!(parsed.warnings.is_empty());
        assert_eq!(parsed.args.metrics_addr.to_string(), "127.0.0.1:9318");
    }

    #[test]
    fn every_upstream_flag_parses_in_single_and_double_dash_spelling() {
        for &(name, value, check) in UPSTREAM_FLAGS {
            for dashes in ["-", "--"] {
                let joined = format!("{dashes}{name}={value}");
                let flag = format!("{dashes}{name}");
                for given in [vec![joined.as_str()], vec![flag.as_str(), value]] {
                    let mut argv = given.clone();
                    argv.push("--metrics-addr=127.0.0.1:1");
                    let parsed = parse(&argv).unwrap_or_else(|err| panic!("{argv:?}: {err}"));
                    assert!(check(&parsed.args), "{argv:?}");
                    assert_eq!(
                        parsed.args.metrics_addr.to_string(),
                        "127.0.0.1:1",
                        "{argv:?}"
                    );
                    assert!(parsed.warnings.is_empty(), "{argv:?}");
                }
            }
        }
        for given in ["-h", "--help", "-help"] {
            assert_eq!(parse(&[given]).unwrap_err().kind(), ErrorKind::DisplayHelp);
        }
    }

    #[test]
    fn every_upstream_flag_is_honoured_so_none_is_inert() {
        let ours: Vec<String> = command()
            .get_arguments()
            .filter_map(|arg| arg.get_long().map(str::to_string))
            .collect();
        for (name, _, _) in UPSTREAM_FLAGS {
            assert!(ours.iter().any(|long| long == name), "{name}");
        }
        assert!(INERT_FLAGS.is_empty());
    }

    #[test]
    fn misspelled_flags_are_still_errors() {
        for argv in [
            &["--remote-runtime-endpoint=/run/c.sock"][..],
            &["-koord-runtime-proxy-endpoint=/run/p.sock"],
            &["--backend-runtime", "Containerd"],
            &["-runtime-hook-server-value=true"],
        ] {
            let err = parse(argv).expect_err(&format!("{argv:?} parsed"));
            assert!(
                matches!(err.kind(), ErrorKind::UnknownArgument),
                "{argv:?}: {:?} {err}",
                err.kind()
            );
        }
    }

    #[test]
    fn repeated_flags_take_the_last_value_and_bools_never_the_next_word() {
        let parsed = parse(&[
            "--runtime-hook-server-val=a",
            "-runtime-hook-server-val",
            "b",
            "--logtostderr",
            "--v=4",
        ])
        .unwrap();
        assert_eq!(parsed.args.runtime_hook_server_val, "b");
        assert_eq!(parsed.args.log.logtostderr, Some(true));
        assert_eq!(parsed.args.log.klog_verbosity, Some(4));
        let parsed = parse(&["-logtostderr=false"]).unwrap();
        assert_eq!(parsed.args.log.logtostderr, Some(false));
        assert!(parse(&["--logtostderr", "false"]).is_err());
    }
}
