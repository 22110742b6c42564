//! The I/O shell of network QoS: a blocking rtnetlink socket that reads the
//! uplink's root qdisc, HTB classes and u32 filters back, and applies
//! [`TcAction`]s. HTB options have no typed form in `netlink-packet-route`,
//! so they are encoded here from the kernel's `tc_htb_opt`/`tc_htb_glob`
//! layouts; u32 filters use the crate's types.
//!
//! A socket belongs to the network namespace of the thread that opened it.
//! Every call blocks: use it from a blocking thread.

use std::net::IpAddr;

use koord_common::units::BytesPerSecond;
use netlink_packet_core::{
    DefaultNla, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST,
    NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::route::{RouteAttribute, RouteMessage};
use netlink_packet_route::tc::{
    TcAttribute, TcFilterU32Option, TcHandle, TcHeader, TcMessage, TcOption, TcU32Key,
    TcU32Selector, TcU32SelectorFlags,
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use super::diff::{
    ETH_P_IP, ETH_P_IPV6, ObservedClass, ObservedFilter, ObservedQdisc, ObservedTc, TcAction,
    filter_slot, wire_class,
};
use super::plan::{
    HtbClassSpec, MAJOR, PodIpFilter, QDISC_MINOR, RATE_TO_QUANTUM, TC_H_ROOT, handle,
};

/// At most this many messages are read from one dump (a uplink with more
/// filters than this is not one this feature set up).
pub const MAX_DUMP_MESSAGES: usize = 65_536;
/// Receive buffer for one `recv` (the kernel's dump chunks are far smaller).
const RECV_BUFFER_BYTES: usize = 256 * 1024;

const TCA_HTB_PARMS: u16 = 1;
const TCA_HTB_INIT: u16 = 2;
const TCA_HTB_RATE64: u16 = 6;
const TCA_HTB_CEIL64: u16 = 7;
const TC_HTB_PROTOVER: u32 = 3;
const TC_LINKLAYER_ETHERNET: u8 = 1;
const TC_RATESPEC_BYTES: usize = 12;
const TC_HTB_OPT_BYTES: usize = 2 * TC_RATESPEC_BYTES + 5 * 4;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NETLINK_HEADER_BYTES: usize = 16;

/// A failed netlink operation: what was attempted, the errno and, when the
/// kernel gave one, its extended-ack message.
#[derive(Debug, thiserror::Error)]
#[error("netlink {operation}: {source}{}", .kernel_message.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
pub struct NetlinkError {
    pub operation: String,
    pub source: std::io::Error,
    pub kernel_message: Option<String>,
}

impl NetlinkError {
    fn io(operation: impl Into<String>, source: std::io::Error) -> Self {
        Self {
            operation: operation.into(),
            source,
            kernel_message: None,
        }
    }

    fn malformed(operation: impl Into<String>, what: impl Into<String>) -> Self {
        Self::io(
            operation,
            std::io::Error::new(std::io::ErrorKind::InvalidData, what.into()),
        )
    }

    /// The kernel's errno, when the kernel refused.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
}

/// A blocking NETLINK_ROUTE socket in the calling thread's network namespace.
pub struct RouteSocket {
    socket: Socket,
    sequence: u32,
}

impl RouteSocket {
    pub fn open() -> Result<Self, NetlinkError> {
        let mut socket =
            Socket::new(NETLINK_ROUTE).map_err(|e| NetlinkError::io("open NETLINK_ROUTE", e))?;
        socket
            .bind_auto()
            .map_err(|e| NetlinkError::io("bind NETLINK_ROUTE", e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| NetlinkError::io("connect NETLINK_ROUTE", e))?;
        // Both are best effort: they only make errors more telling.
        let _ = socket.set_ext_ack(true);
        let _ = socket.set_cap_ack(true);
        Ok(Self {
            socket,
            sequence: 1,
        })
    }

    /// Sends one request and collects the answer: the messages of a dump
    /// (`NLM_F_DUMP` in `flags`) or nothing for an acknowledged change.
    pub fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
        operation: &str,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.sequence = self.sequence.wrapping_add(1);
        let sequence = self.sequence;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
        packet.finalize();
        let mut bytes = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut bytes);
        self.socket
            .send(&bytes, 0)
            .map_err(|e| NetlinkError::io(operation, e))?;
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut answers = Vec::new();
        loop {
            let mut buffer = Vec::with_capacity(RECV_BUFFER_BYTES);
            let received = self
                .socket
                .recv(&mut buffer, 0)
                .map_err(|e| NetlinkError::io(operation, e))?;
            buffer.truncate(received);
            let mut offset = 0usize;
            while offset + NETLINK_HEADER_BYTES <= buffer.len() {
                let length = u32::from_ne_bytes([
                    buffer[offset],
                    buffer[offset + 1],
                    buffer[offset + 2],
                    buffer[offset + 3],
                ]) as usize;
                if length < NETLINK_HEADER_BYTES || offset + length > buffer.len() {
                    return Err(NetlinkError::malformed(
                        operation,
                        "truncated netlink message",
                    ));
                }
                let chunk = &buffer[offset..offset + length];
                offset += (length + 3) & !3;
                let sequence_of_chunk =
                    u32::from_ne_bytes([chunk[8], chunk[9], chunk[10], chunk[11]]);
                if sequence_of_chunk != sequence {
                    continue;
                }
                let parsed = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(chunk) {
                    Ok(parsed) => parsed,
                    // An entry this crate cannot decode is not one of ours.
                    Err(_) if dump => continue,
                    Err(err) => {
                        return Err(NetlinkError::malformed(operation, err.to_string()));
                    }
                };
                match parsed.payload {
                    NetlinkPayload::Done(_) => return Ok(answers),
                    NetlinkPayload::Error(error) => {
                        if error.code.is_none() {
                            if !dump {
                                return Ok(answers);
                            }
                            continue;
                        }
                        return Err(NetlinkError {
                            operation: operation.to_string(),
                            source: error.to_io(),
                            kernel_message: extack_message(&error.header),
                        });
                    }
                    NetlinkPayload::InnerMessage(inner) => {
                        if answers.len() >= MAX_DUMP_MESSAGES {
                            return Err(NetlinkError::malformed(
                                operation,
                                format!("more than {MAX_DUMP_MESSAGES} entries"),
                            ));
                        }
                        answers.push(inner);
                    }
                    _ => {}
                }
            }
        }
    }

    /// The index of the interface `name`.
    pub fn link_index(&mut self, name: &str) -> Result<u32, NetlinkError> {
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(name.to_string()));
        let answers = self.request(
            RouteNetlinkMessage::GetLink(message),
            0,
            &format!("get link {name}"),
        )?;
        answers
            .into_iter()
            .find_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => Some(link.header.index),
                _ => None,
            })
            .ok_or_else(|| NetlinkError::malformed(format!("get link {name}"), "no answer"))
    }

    /// The name of the interface with `index`.
    pub fn link_name(&mut self, index: u32) -> Result<String, NetlinkError> {
        let mut message = LinkMessage::default();
        message.header.index = index;
        let operation = format!("get link #{index}");
        let answers = self.request(RouteNetlinkMessage::GetLink(message), 0, &operation)?;
        answers
            .into_iter()
            .find_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => {
                    link.attributes.into_iter().find_map(|a| match a {
                        LinkAttribute::IfName(name) => Some(name),
                        _ => None,
                    })
                }
                _ => None,
            })
            .ok_or_else(|| NetlinkError::malformed(operation, "no name in the answer"))
    }

    /// The output interface of the IPv4 default route in the main table
    /// (upstream picks the uplink the same way); `None` without one.
    pub fn default_route_link(&mut self) -> Result<Option<u32>, NetlinkError> {
        let mut message = RouteMessage::default();
        message.header.address_family = netlink_packet_route::AddressFamily::Inet;
        let answers = self.request(
            RouteNetlinkMessage::GetRoute(message),
            NLM_F_DUMP,
            "dump routes",
        )?;
        const MAIN_TABLE: u32 = 254;
        Ok(answers.into_iter().find_map(|answer| {
            let RouteNetlinkMessage::NewRoute(route) = answer else {
                return None;
            };
            if route.header.destination_prefix_length != 0 {
                return None;
            }
            let table = route
                .attributes
                .iter()
                .find_map(|a| match a {
                    RouteAttribute::Table(table) => Some(*table),
                    _ => None,
                })
                .unwrap_or(u32::from(route.header.table));
            if table != MAIN_TABLE {
                return None;
            }
            route.attributes.iter().find_map(|a| match a {
                RouteAttribute::Oif(index) => Some(*index),
                _ => None,
            })
        }))
    }

    /// The uplink's root qdisc, HTB classes and u32 filters under `1:`.
    pub fn observe(&mut self, ifindex: u32) -> Result<ObservedTc, NetlinkError> {
        let index = to_index(ifindex)?;
        let qdiscs = self.request(
            RouteNetlinkMessage::GetQueueDiscipline(TcMessage::with_index(index)),
            NLM_F_DUMP,
            "dump qdiscs",
        )?;
        let root_qdisc = qdiscs.into_iter().find_map(|answer| match answer {
            RouteNetlinkMessage::NewQueueDiscipline(q)
                if q.header.index == index && u32::from(q.header.parent) == TC_H_ROOT =>
            {
                Some(observed_qdisc(&q))
            }
            _ => None,
        });
        let mut observed = ObservedTc {
            root_qdisc,
            ..ObservedTc::default()
        };
        if !observed.has_our_qdisc() {
            return Ok(observed);
        }
        let classes = self.request(
            RouteNetlinkMessage::GetTrafficClass(TcMessage::with_index(index)),
            NLM_F_DUMP,
            "dump classes",
        )?;
        observed.classes = classes
            .into_iter()
            .filter_map(|answer| match answer {
                RouteNetlinkMessage::NewTrafficClass(c) if c.header.index == index => {
                    observed_class(&c)
                }
                _ => None,
            })
            .collect();
        let mut filter_request = TcMessage::with_index(index);
        filter_request.header.parent = TcHandle::from(handle(MAJOR, QDISC_MINOR));
        let filters = self.request(
            RouteNetlinkMessage::GetTrafficFilter(filter_request),
            NLM_F_DUMP,
            "dump filters",
        )?;
        observed.filters = filters
            .into_iter()
            .filter_map(|answer| match answer {
                RouteNetlinkMessage::NewTrafficFilter(f) if f.header.index == index => {
                    observed_filter(&f)
                }
                _ => None,
            })
            .collect();
        Ok(observed)
    }

    /// Applies one change to the uplink.
    pub fn apply(&mut self, ifindex: u32, action: &TcAction) -> Result<(), NetlinkError> {
        let index = to_index(ifindex)?;
        match action {
            TcAction::ReplaceRootQdisc { default_minor } => {
                // An HTB `1:` with another default class cannot be changed in
                // place: take it away first (absent is fine).
                match self.delete_root_qdisc(index) {
                    Ok(()) => {}
                    Err(err) if matches!(err.errno(), Some(2 | 22)) => {}
                    Err(err) => return Err(err),
                }
                let header = tc_header(index, handle(MAJOR, QDISC_MINOR), TC_H_ROOT, 0);
                let attributes = vec![
                    TcAttribute::Kind("htb".to_string()),
                    TcAttribute::Options(vec![TcOption::Other(DefaultNla::new(
                        TCA_HTB_INIT,
                        htb_glob(u32::from(*default_minor)),
                    ))]),
                ];
                self.request(
                    RouteNetlinkMessage::NewQueueDiscipline(TcMessage::from_parts(
                        header, attributes,
                    )),
                    NLM_F_CREATE | NLM_F_REPLACE,
                    "add root htb qdisc 1:",
                )?;
                Ok(())
            }
            TcAction::DeleteRootQdisc => self.delete_root_qdisc(index),
            TcAction::AddClass(spec) => {
                self.put_class(index, spec, NLM_F_CREATE | NLM_F_EXCL, "add")
            }
            TcAction::ChangeClass(spec) => self.put_class(index, spec, 0, "change"),
            TcAction::DeleteClass {
                handle: doomed,
                parent,
            } => {
                let header = tc_header(index, *doomed, *parent, 0);
                self.request(
                    RouteNetlinkMessage::DelTrafficClass(TcMessage::from_parts(header, Vec::new())),
                    0,
                    &format!("delete htb class 1:{:x}", doomed & 0xFFFF),
                )?;
                Ok(())
            }
            TcAction::AddFilter(filter) => self.add_filter(index, filter),
            TcAction::DeleteFilter {
                prio,
                protocol,
                handle: filter_handle,
            } => {
                let header = tc_header(
                    index,
                    *filter_handle,
                    handle(MAJOR, QDISC_MINOR),
                    filter_info(*prio, *protocol),
                );
                self.request(
                    RouteNetlinkMessage::DelTrafficFilter(TcMessage::from_parts(
                        header,
                        vec![TcAttribute::Kind("u32".to_string())],
                    )),
                    0,
                    &format!("delete u32 filter {filter_handle:#x} prio {prio}"),
                )?;
                Ok(())
            }
        }
    }

    fn delete_root_qdisc(&mut self, index: i32) -> Result<(), NetlinkError> {
        let header = tc_header(index, handle(MAJOR, QDISC_MINOR), TC_H_ROOT, 0);
        self.request(
            RouteNetlinkMessage::DelQueueDiscipline(TcMessage::from_parts(header, Vec::new())),
            0,
            "delete root qdisc 1:",
        )?;
        Ok(())
    }

    fn put_class(
        &mut self,
        index: i32,
        spec: &HtbClassSpec,
        flags: u16,
        verb: &str,
    ) -> Result<(), NetlinkError> {
        let header = tc_header(index, spec.handle(), spec.parent, 0);
        let attributes = vec![
            TcAttribute::Kind("htb".to_string()),
            TcAttribute::Options(htb_class_options(spec)),
        ];
        self.request(
            RouteNetlinkMessage::NewTrafficClass(TcMessage::from_parts(header, attributes)),
            flags,
            &format!(
                "{verb} htb class 1:{} rate {} ceil {} bit/s",
                spec.minor, spec.rate_bps, spec.ceil_bps
            ),
        )?;
        Ok(())
    }

    fn add_filter(&mut self, index: i32, filter: &PodIpFilter) -> Result<(), NetlinkError> {
        let (prio, protocol) = filter_slot(&filter.ip);
        let header = tc_header(
            index,
            0,
            handle(MAJOR, QDISC_MINOR),
            filter_info(prio, protocol),
        );
        let options = vec![
            TcOption::U32(TcFilterU32Option::ClassId(TcHandle::from(handle(
                MAJOR,
                filter.target_minor,
            )))),
            TcOption::U32(TcFilterU32Option::Selector(source_selector(&filter.ip))),
        ];
        let attributes = vec![
            TcAttribute::Kind("u32".to_string()),
            TcAttribute::Options(options),
        ];
        self.request(
            RouteNetlinkMessage::NewTrafficFilter(TcMessage::from_parts(header, attributes)),
            NLM_F_CREATE | NLM_F_EXCL,
            &format!(
                "add u32 filter src {} -> {} ({})",
                filter.ip,
                filter.class.name(),
                filter.pod
            ),
        )?;
        Ok(())
    }
}

fn to_index(ifindex: u32) -> Result<i32, NetlinkError> {
    i32::try_from(ifindex)
        .map_err(|_| NetlinkError::malformed("interface", format!("index {ifindex} out of range")))
}

fn tc_header(index: i32, own: u32, parent: u32, info: u32) -> TcHeader {
    TcHeader {
        index,
        handle: TcHandle::from(own),
        parent: TcHandle::from(parent),
        info,
        ..TcHeader::default()
    }
}

/// `tcm_info` of a filter: priority in the upper half, the protocol in
/// network order in the lower half.
pub fn filter_info(prio: u16, protocol: u16) -> u32 {
    (u32::from(prio) << 16) | u32::from(protocol.to_be())
}

/// The u32 selector matching exactly the source address `ip`.
pub fn source_selector(ip: &IpAddr) -> TcU32Selector {
    let words: Vec<(i32, u32)> = match ip {
        IpAddr::V4(v4) => vec![(12, u32::from(*v4))],
        IpAddr::V6(v6) => v6
            .octets()
            .chunks_exact(4)
            .zip([8, 12, 16, 20])
            .map(|(word, off)| {
                (
                    off,
                    u32::from_be_bytes([word[0], word[1], word[2], word[3]]),
                )
            })
            .collect(),
    };
    let mut selector = TcU32Selector::default();
    selector.flags = TcU32SelectorFlags::Terminal;
    selector.nkeys = u8::try_from(words.len()).unwrap_or(u8::MAX);
    selector.keys = words
        .into_iter()
        .map(|(off, val)| {
            let mut key = TcU32Key::default();
            key.mask = u32::MAX;
            key.val = val;
            key.off = off;
            key
        })
        .collect();
    selector
}

/// The source address a selector matches, when it is exactly the shape
/// [`source_selector`] builds.
pub fn selector_source(selector: &TcU32Selector, protocol: u16) -> Option<IpAddr> {
    let full = selector
        .keys
        .iter()
        .all(|k| k.mask == u32::MAX && k.offmask == 0);
    if !full {
        return None;
    }
    match (protocol, selector.keys.as_slice()) {
        (ETH_P_IP, [key]) if key.off == 12 => Some(IpAddr::from(key.val.to_be_bytes())),
        (ETH_P_IPV6, [a, b, c, d]) if [a.off, b.off, c.off, d.off] == [8, 12, 16, 20] => {
            let mut octets = [0u8; 16];
            for (i, key) in [a, b, c, d].into_iter().enumerate() {
                octets[i * 4..i * 4 + 4].copy_from_slice(&key.val.to_be_bytes());
            }
            Some(IpAddr::from(octets))
        }
        _ => None,
    }
}

/// `struct tc_htb_glob` (host order).
fn htb_glob(default_minor: u32) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(20);
    for word in [TC_HTB_PROTOVER, RATE_TO_QUANTUM, default_minor, 0, 0] {
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    bytes
}

fn ratespec(rate: BytesPerSecond) -> [u8; TC_RATESPEC_BYTES] {
    let mut bytes = [0u8; TC_RATESPEC_BYTES];
    bytes[1] = TC_LINKLAYER_ETHERNET;
    // Saturated; the full rate then follows in TCA_HTB_RATE64 / CEIL64.
    let rate32 = u32::try_from(rate.0).unwrap_or(u32::MAX);
    bytes[8..12].copy_from_slice(&rate32.to_ne_bytes());
    bytes
}

/// `TCA_HTB_PARMS` (+ the 64-bit rates when the 32-bit fields overflow).
fn htb_class_options(spec: &HtbClassSpec) -> Vec<TcOption> {
    let wire = wire_class(spec);
    let mut opt = Vec::with_capacity(TC_HTB_OPT_BYTES);
    opt.extend_from_slice(&ratespec(wire.rate));
    opt.extend_from_slice(&ratespec(wire.ceil));
    for word in [
        wire.buffer_ticks,
        wire.cbuffer_ticks,
        wire.quantum,
        0,
        wire.prio,
    ] {
        opt.extend_from_slice(&word.to_ne_bytes());
    }
    let mut options = vec![TcOption::Other(DefaultNla::new(TCA_HTB_PARMS, opt))];
    if wire.rate.0 > u64::from(u32::MAX) {
        options.push(TcOption::Other(DefaultNla::new(
            TCA_HTB_RATE64,
            wire.rate.0.to_ne_bytes().to_vec(),
        )));
    }
    if wire.ceil.0 > u64::from(u32::MAX) {
        options.push(TcOption::Other(DefaultNla::new(
            TCA_HTB_CEIL64,
            wire.ceil.0.to_ne_bytes().to_vec(),
        )));
    }
    options
}

fn kind_of(message: &TcMessage) -> Option<&str> {
    message.attributes.iter().find_map(|a| match a {
        TcAttribute::Kind(kind) => Some(kind.as_str()),
        _ => None,
    })
}

/// The raw nested attributes of an HTB `TCA_OPTIONS` (the crate keeps the
/// whole nest as one opaque attribute for kinds it does not model).
fn htb_nested(message: &TcMessage) -> Vec<(u16, Vec<u8>)> {
    let mut raw = Vec::new();
    for attribute in &message.attributes {
        let TcAttribute::Options(options) = attribute else {
            continue;
        };
        for option in options {
            if let TcOption::Other(nla) = option {
                let mut value = vec![0u8; netlink_packet_core::Nla::value_len(nla)];
                netlink_packet_core::Nla::emit_value(nla, &mut value);
                raw.extend(parse_nlas(&value));
            }
        }
    }
    raw
}

/// Splits a run of netlink attributes (bounded by the buffer).
fn parse_nlas(mut bytes: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let length = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        if length < 4 || length > bytes.len() {
            break;
        }
        out.push((kind, bytes[4..length].to_vec()));
        let aligned = (length + 3) & !3;
        bytes = bytes.get(aligned..).unwrap_or(&[]);
    }
    out
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let word = bytes.get(at..at + 4)?;
    Some(u32::from_ne_bytes([word[0], word[1], word[2], word[3]]))
}

fn read_u64(bytes: &[u8]) -> Option<u64> {
    let word: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some(u64::from_ne_bytes(word))
}

fn observed_qdisc(message: &TcMessage) -> ObservedQdisc {
    let kind = kind_of(message).unwrap_or_default().to_string();
    let default_minor = if kind == "htb" {
        htb_nested(message)
            .into_iter()
            .find(|(k, _)| *k == TCA_HTB_INIT)
            .and_then(|(_, v)| read_u32(&v, 8))
    } else {
        None
    };
    ObservedQdisc {
        kind,
        handle: u32::from(message.header.handle),
        default_minor,
    }
}

fn observed_class(message: &TcMessage) -> Option<ObservedClass> {
    if kind_of(message) != Some("htb") {
        return None;
    }
    let nested = htb_nested(message);
    let parms = nested
        .iter()
        .find(|(k, _)| *k == TCA_HTB_PARMS)
        .map(|(_, v)| v)?;
    if parms.len() < TC_HTB_OPT_BYTES {
        return None;
    }
    let mut rate = BytesPerSecond(u64::from(read_u32(parms, 8)?));
    let mut ceil = BytesPerSecond(u64::from(read_u32(parms, TC_RATESPEC_BYTES + 8)?));
    for (kind, value) in &nested {
        match *kind {
            TCA_HTB_RATE64 => rate = read_u64(value).map_or(rate, BytesPerSecond),
            TCA_HTB_CEIL64 => ceil = read_u64(value).map_or(ceil, BytesPerSecond),
            _ => {}
        }
    }
    let base = 2 * TC_RATESPEC_BYTES;
    Some(ObservedClass {
        handle: u32::from(message.header.handle),
        parent: u32::from(message.header.parent),
        rate,
        ceil,
        buffer_ticks: read_u32(parms, base)?,
        cbuffer_ticks: read_u32(parms, base + 4)?,
        quantum: read_u32(parms, base + 8)?,
        prio: read_u32(parms, base + 16)?,
    })
}

fn observed_filter(message: &TcMessage) -> Option<ObservedFilter> {
    if kind_of(message) != Some("u32") {
        return None;
    }
    let info = message.header.info;
    let prio = u16::try_from(info >> 16).ok()?;
    let protocol = u16::from_be((info & 0xffff) as u16);
    let mut class = None;
    let mut selector = None;
    for attribute in &message.attributes {
        if let TcAttribute::Options(options) = attribute {
            for option in options {
                match option {
                    TcOption::U32(TcFilterU32Option::ClassId(id)) => class = Some(u32::from(*id)),
                    TcOption::U32(TcFilterU32Option::Selector(s)) => selector = Some(s.clone()),
                    _ => {}
                }
            }
        }
    }
    // Hash tables and priority heads carry no selector: not filters.
    let selector = selector?;
    Some(ObservedFilter {
        prio,
        protocol,
        handle: u32::from(message.header.handle),
        class,
        source: selector_source(&selector, protocol),
    })
}

/// The kernel's extended-ack text from an error payload (the echoed request
/// header, capped by `NETLINK_CAP_ACK`, then attributes).
fn extack_message(payload: &[u8]) -> Option<String> {
    let attributes = payload.get(NETLINK_HEADER_BYTES..)?;
    parse_nlas(attributes)
        .into_iter()
        .find(|(kind, _)| *kind == NLMSGERR_ATTR_MSG)
        .map(|(_, value)| {
            let text = value.split(|b| *b == 0).next().unwrap_or_default();
            String::from_utf8_lossy(text).into_owned()
        })
        .filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_common::units::Bytes;

    /// The options of a class whose rate and ceil are `rate` and `ceil`
    /// bytes per second, as (attribute kind, value).
    fn encoded(rate: u64, ceil: u64) -> Vec<(u16, Vec<u8>)> {
        let spec = HtbClassSpec {
            minor: 2,
            parent: handle(MAJOR, 1),
            rate_bps: rate * 8,
            ceil_bps: ceil * 8,
            prio: 0,
            quantum_bytes: 1500,
            burst: Bytes(1600),
            cburst: Bytes(1600),
        };
        htb_class_options(&spec)
            .iter()
            .map(|option| {
                let TcOption::Other(nla) = option else {
                    panic!("unexpected option {option:?}");
                };
                let mut value = vec![0u8; netlink_packet_core::Nla::value_len(nla)];
                netlink_packet_core::Nla::emit_value(nla, &mut value);
                (netlink_packet_core::Nla::kind(nla), value)
            })
            .collect()
    }

    fn rate32(parms: &[u8], ratespec: usize) -> u32 {
        read_u32(parms, ratespec * TC_RATESPEC_BYTES + 8).unwrap()
    }

    #[test]
    fn rates_above_32_bits_saturate_the_parms_and_add_64_bit_attributes() {
        let small = encoded(625_000, 2_500_000);
        assert_eq!(small.len(), 1, "no 64-bit attribute below 2^32 B/s");
        assert_eq!(small[0].0, TCA_HTB_PARMS);
        assert_eq!(small[0].1.len(), TC_HTB_OPT_BYTES);
        assert_eq!(
            (rate32(&small[0].1, 0), rate32(&small[0].1, 1)),
            (625_000, 2_500_000)
        );

        let max32 = u64::from(u32::MAX);
        let big = encoded(max32 + 10, 1000);
        assert_eq!(
            (rate32(&big[0].1, 0), rate32(&big[0].1, 1)),
            (u32::MAX, 1000)
        );
        assert_eq!(
            big[1..].to_vec(),
            vec![(TCA_HTB_RATE64, (max32 + 10).to_ne_bytes().to_vec())]
        );

        let both = encoded(max32 + 1, max32 + 2);
        assert_eq!(
            (rate32(&both[0].1, 0), rate32(&both[0].1, 1)),
            (u32::MAX, u32::MAX)
        );
        assert_eq!(
            both[1..].to_vec(),
            vec![
                (TCA_HTB_RATE64, (max32 + 1).to_ne_bytes().to_vec()),
                (TCA_HTB_CEIL64, (max32 + 2).to_ne_bytes().to_vec()),
            ]
        );
        // Exactly 2^32 - 1 still fits the 32-bit field.
        assert_eq!(encoded(max32, max32).len(), 1);
    }
}
