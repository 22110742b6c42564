//! Listen addresses as operators write them for the Go binaries (`:8080`) or as
//! Rust prints them (`0.0.0.0:8080`, `[::1]:9316`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

/// Why a listen address was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrParseError {
    #[error("empty address; expected HOST:PORT such as \":8080\" or \"127.0.0.1:8080\"")]
    Empty,
    #[error("address {0:?} has no port; expected HOST:PORT (did you mean \":{0}\"?)")]
    MissingPort(String),
    #[error("address {input:?} has an invalid port {port:?}; expected a number from 0 to 65535")]
    InvalidPort { input: String, port: String },
    #[error(
        "address {input:?} has host {host:?}, which is not an IP address; use an IP such as 0.0.0.0, 127.0.0.1 or [::1]"
    )]
    InvalidHost { input: String, host: String },
}

/// A TCP address to bind. `:PORT` (Go style) means every IPv4 interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenAddr(SocketAddr);

impl ListenAddr {
    pub fn new(addr: SocketAddr) -> Self {
        Self(addr)
    }

    pub fn socket_addr(&self) -> SocketAddr {
        self.0
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        Self(addr)
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for ListenAddr {
    type Err = AddrParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(AddrParseError::Empty);
        }
        let (host, port) = split_host_port(trimmed)?;
        let port: u16 = port.parse().map_err(|_| AddrParseError::InvalidPort {
            input: trimmed.to_string(),
            port: port.to_string(),
        })?;
        let ip = parse_host(trimmed, host)?;
        Ok(Self(SocketAddr::new(ip, port)))
    }
}

fn split_host_port(input: &str) -> Result<(&str, &str), AddrParseError> {
    if let Some(rest) = input.strip_prefix('[') {
        // Bracketed IPv6: "[::1]:8080".
        let Some((host, after)) = rest.split_once(']') else {
            return Err(AddrParseError::InvalidHost {
                input: input.to_string(),
                host: input.to_string(),
            });
        };
        let Some(port) = after.strip_prefix(':') else {
            return Err(AddrParseError::MissingPort(input.to_string()));
        };
        return Ok((host, port));
    }
    match input.rsplit_once(':') {
        // An unbracketed IPv6 literal has several colons and is ambiguous.
        Some((host, _)) if host.contains(':') => Err(AddrParseError::InvalidHost {
            input: input.to_string(),
            host: format!("{host} (write IPv6 hosts in brackets, e.g. [::1]:8080)"),
        }),
        Some((host, port)) => Ok((host, port)),
        None => Err(AddrParseError::MissingPort(input.to_string())),
    }
}

fn parse_host(input: &str, host: &str) -> Result<IpAddr, AddrParseError> {
    if host.is_empty() {
        return Ok(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    host.parse().map_err(|_| AddrParseError::InvalidHost {
        input: input.to_string(),
        host: host.to_string(),
    })
}

/// An address that may also be switched off, as controller-runtime does with
/// `--metrics-addr=0` (and an empty value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeAt {
    Disabled,
    Addr(ListenAddr),
}

impl ServeAt {
    pub fn addr(&self) -> Option<ListenAddr> {
        match self {
            ServeAt::Disabled => None,
            ServeAt::Addr(addr) => Some(*addr),
        }
    }
}

impl fmt::Display for ServeAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeAt::Disabled => f.write_str("0"),
            ServeAt::Addr(addr) => addr.fmt(f),
        }
    }
}

impl FromStr for ServeAt {
    type Err = AddrParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        match input.trim() {
            "" | "0" => Ok(ServeAt::Disabled),
            other => other.parse().map(ServeAt::Addr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &str) -> Result<SocketAddr, AddrParseError> {
        input.parse::<ListenAddr>().map(|a| a.socket_addr())
    }

    #[test]
    fn go_style_port_only_means_all_ipv4_interfaces() {
        assert_eq!(parse(":8080"), Ok("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(parse(":9316"), Ok(SocketAddr::from(([0, 0, 0, 0], 9316))));
    }

    #[test]
    fn full_addresses_are_accepted() {
        assert_eq!(
            parse("0.0.0.0:8080"),
            Ok(SocketAddr::from(([0, 0, 0, 0], 8080)))
        );
        assert_eq!(
            parse("127.0.0.1:0"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 0)))
        );
        assert_eq!(
            parse("localhost:10251"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 10251)))
        );
        assert_eq!(parse("[::1]:8000"), Ok("[::1]:8000".parse().unwrap()));
        assert_eq!(parse("[::]:8000"), Ok("[::]:8000".parse().unwrap()));
        assert_eq!(parse("  :80 "), Ok(SocketAddr::from(([0, 0, 0, 0], 80))));
    }

    #[test]
    fn malformed_addresses_are_clear_errors() {
        assert_eq!(parse(""), Err(AddrParseError::Empty));
        assert_eq!(
            parse("8080"),
            Err(AddrParseError::MissingPort("8080".into()))
        );
        assert!(matches!(
            parse(":http"),
            Err(AddrParseError::InvalidPort { .. })
        ));
        assert!(matches!(
            parse(":70000"),
            Err(AddrParseError::InvalidPort { .. })
        ));
        assert!(matches!(
            parse("127.0.0.1:"),
            Err(AddrParseError::InvalidPort { .. })
        ));
        assert!(matches!(
            parse("example.com:80"),
            Err(AddrParseError::InvalidHost { .. })
        ));
        assert!(matches!(
            parse("::1:80"),
            Err(AddrParseError::InvalidHost { .. })
        ));
        assert!(matches!(
            parse("[::1"),
            Err(AddrParseError::InvalidHost { .. })
        ));
        assert!(matches!(
            parse("[::1]"),
            Err(AddrParseError::MissingPort(_))
        ));
        let message = parse("8080").unwrap_err().to_string();
        assert!(message.contains("\":8080\""), "{message}");
    }

    #[test]
    fn serve_at_zero_or_empty_disables() {
        assert_eq!("0".parse::<ServeAt>(), Ok(ServeAt::Disabled));
        assert_eq!("".parse::<ServeAt>(), Ok(ServeAt::Disabled));
        assert_eq!(
            ":0".parse::<ServeAt>()
                .map(|s| s.addr().map(|a| a.socket_addr())),
            Ok(Some(SocketAddr::from(([0, 0, 0, 0], 0))))
        );
        assert!("nope".parse::<ServeAt>().is_err());
    }
}
