//! Network QoS against the real kernel: two private network namespaces
//! joined by a veth pair (10.250.0.0/24), the sender side carrying an "LS
//! pod" and a "BE pod" address. koordlet's netqos shell installs its plan on
//! the sender's veth through rtnetlink; TCP from both addresses at once shows
//! BE held near its class limit while LS keeps its guarantee; an LS pod
//! whose `koordinator.sh/networkQOS` sets an egress limit is held near that
//! limit by a class of its own. Classes and filters are read back, a second
//! round changes nothing, a gone pod's filter and a dropped pod class are
//! removed, and disabling removes the tree.
//!
//! Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for namespaces); otherwise, or
//! when a namespace cannot be made, it prints SKIP with the reason. Nothing
//! outside the two throwaway namespaces is touched; they vanish (with the
//! veth pair) when the test's handles drop.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use apis::slo::v1alpha1::{
    NetworkQOS, NetworkQOSCfg, NodeSLOSpec, ResourceQOS, ResourceQOSStrategy, SystemStrategy,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use koordlet::qosmanager::netqos::diff::{class_handle, wire_class};
use koordlet::qosmanager::netqos::plan::{BE_CLASS_MINOR, MAJOR, NetQosClass, handle};
use koordlet::qosmanager::netqos::{
    NetQosDecision, NetQosPod, PodNetworkQos, RouteSocket, decide, run_round,
};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use rustix::thread::{LinkNameSpaceType, UnshareFlags, move_into_link_name_space};

const SENDER_LINK: &str = "nqos-a";
const RECEIVER_LINK: &str = "nqos-b";
const LS_IP: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 1);
const BE_IP: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 2);
const RECEIVER_IP: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 10);
/// 100 Mbit/s total; LS guaranteed 50 %, BE 5 % up to a 20 % limit.
const TOTAL: &str = "100M";
const TOTAL_BPS: f64 = 100e6;
const LS_REQUEST_PCT: i32 = 50;
const BE_REQUEST_PCT: i32 = 5;
const BE_LIMIT_PCT: i32 = 20;
/// The LS pod's own egress limit (`koordinator.sh/networkQOS`), bit/s.
const LS_POD_LIMIT: &str = "10M";
const LS_POD_LIMIT_BPS: f64 = 10e6;

/// A network namespace kept alive by an open handle; gone on drop.
struct Netns {
    handle: File,
}

impl Netns {
    fn new() -> Result<Self, String> {
        std::thread::spawn(|| {
            // SAFETY: only the network namespace of this short-lived thread is
            // unshared (no CLONE_FILES), so no descriptor table is split.
            #[allow(unsafe_code)]
            unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }
                .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
            File::open("/proc/thread-self/ns/net")
                .map(|handle| Netns { handle })
                .map_err(|e| format!("open /proc/thread-self/ns/net: {e}"))
        })
        .join()
        .map_err(|_| "namespace thread panicked".to_string())?
    }

    /// Runs `work` on a thread that entered this namespace.
    fn run<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    self.enter();
                    work()
                })
                .join()
                .expect("namespace worker panicked")
        })
    }

    /// Moves the calling thread into this namespace.
    fn enter(&self) {
        move_into_link_name_space(self.handle.as_fd(), Some(LinkNameSpaceType::Network))
            .expect("setns into the test namespace");
    }
}

fn link_up(socket: &mut RouteSocket, name: &str) -> u32 {
    let index = socket.link_index(name).expect("link index");
    let mut message = LinkMessage::default();
    message.header.index = index;
    message.header.flags = LinkFlags::Up;
    message.header.change_mask = LinkFlags::Up;
    socket
        .request(RouteNetlinkMessage::SetLink(message), 0, "set link up")
        .expect("set link up");
    index
}

fn add_address(socket: &mut RouteSocket, index: u32, ip: Ipv4Addr) {
    let mut message = AddressMessage::default();
    message.header.family = AddressFamily::Inet;
    message.header.prefix_len = 24;
    message.header.index = index;
    message
        .attributes
        .push(AddressAttribute::Local(IpAddr::V4(ip)));
    message
        .attributes
        .push(AddressAttribute::Address(IpAddr::V4(ip)));
    socket
        .request(
            RouteNetlinkMessage::NewAddress(message),
            NLM_F_CREATE | NLM_F_EXCL,
            "add address",
        )
        .expect("add address");
}

/// veth pair sender(A) <-> receiver(B) with the test's addresses; the
/// sender's index.
fn build_link(sender: &Netns, receiver: &Netns) -> u32 {
    let receiver_fd = receiver.handle.as_raw_fd();
    let sender_index = sender.run(|| {
        let mut socket = RouteSocket::open().expect("route socket");
        let mut peer = LinkMessage::default();
        peer.attributes
            .push(LinkAttribute::IfName(RECEIVER_LINK.to_string()));
        peer.attributes.push(LinkAttribute::NetNsFd(receiver_fd));
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(SENDER_LINK.to_string()));
        message.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        socket
            .request(
                RouteNetlinkMessage::NewLink(message),
                NLM_F_CREATE | NLM_F_EXCL,
                "add veth",
            )
            .expect("add veth pair");
        let index = link_up(&mut socket, SENDER_LINK);
        add_address(&mut socket, index, LS_IP);
        add_address(&mut socket, index, BE_IP);
        index
    });
    receiver.run(|| {
        let mut socket = RouteSocket::open().expect("route socket");
        let index = link_up(&mut socket, RECEIVER_LINK);
        add_address(&mut socket, index, RECEIVER_IP);
        link_up(&mut socket, "lo");
    });
    sender_index
}

fn node_slo(enabled: bool) -> NodeSLOSpec {
    let class = |request: i32, limit: i32| ResourceQOS {
        network_qos: Some(NetworkQOSCfg {
            enable: Some(enabled),
            network_qos: NetworkQOS {
                egress_request: Some(IntOrString::Int(request)),
                egress_limit: Some(IntOrString::Int(limit)),
                ..NetworkQOS::default()
            },
        }),
        ..ResourceQOS::default()
    };
    NodeSLOSpec {
        resource_qos_strategy: Some(ResourceQOSStrategy {
            ls_class: Some(class(LS_REQUEST_PCT, 100)),
            be_class: Some(class(BE_REQUEST_PCT, BE_LIMIT_PCT)),
            ..ResourceQOSStrategy::default()
        }),
        system_strategy: Some(SystemStrategy {
            total_network_bandwidth: Some(Quantity(TOTAL.to_string())),
            ..SystemStrategy::default()
        }),
        ..NodeSLOSpec::default()
    }
}

fn pods(with_be: bool) -> Vec<NetQosPod> {
    pods_with_ls_annotation(with_be, None)
}

/// The LS pod (with `koordinator.sh/networkQOS` = `ls_annotation`) and,
/// with `with_be`, the BE pod.
fn pods_with_ls_annotation(with_be: bool, ls_annotation: Option<&str>) -> Vec<NetQosPod> {
    let pod = |key: &str, label: &str, ip: Ipv4Addr| NetQosPod {
        key: key.to_string(),
        qos_label: Some(label.to_string()),
        ips: vec![IpAddr::V4(ip)],
        host_network: false,
        terminated: false,
        network_qos: PodNetworkQos::Unset,
    };
    let mut ls = pod("test/ls", "LS", LS_IP);
    ls.network_qos = PodNetworkQos::from_annotation(ls_annotation);
    let mut pods = vec![ls];
    if with_be {
        pods.push(pod("test/be", "BE", BE_IP));
    }
    pods
}

/// Sends TCP from each of `sources` at once for `warmup + window`; the
/// receiver's rates (bit/s) from the LS and the BE address over the window.
fn measure(
    sender: &Netns,
    receiver: &Netns,
    sources: &[Ipv4Addr],
    warmup: Duration,
    window: Duration,
) -> (f64, f64) {
    let received: Arc<BTreeMap<Ipv4Addr, AtomicU64>> = Arc::new(
        [(LS_IP, AtomicU64::new(0)), (BE_IP, AtomicU64::new(0))]
            .into_iter()
            .collect(),
    );
    let stop = AtomicBool::new(false);
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let received_ref = &received;
        let stop_ref = &stop;
        scope.spawn(move || {
            receiver.enter();
            let listener = TcpListener::bind(SocketAddrV4::new(RECEIVER_IP, 0)).expect("listen");
            port_tx
                .send(listener.local_addr().expect("addr").port())
                .expect("port");
            std::thread::scope(|inner| {
                for _ in 0..sources.len() {
                    let (mut stream, peer) = listener.accept().expect("accept");
                    let IpAddr::V4(source) = peer.ip() else {
                        panic!("IPv6 peer")
                    };
                    let counter = &received_ref[&source];
                    inner.spawn(move || {
                        let mut buffer = vec![0u8; 256 * 1024];
                        while let Ok(n) = stream.read(&mut buffer) {
                            if n == 0 {
                                break;
                            }
                            counter.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    });
                }
            });
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("receiver port");
        for &source in sources {
            scope.spawn(move || {
                sender.enter();
                let mut stream = connect_from(source, SocketAddrV4::new(RECEIVER_IP, port));
                stream
                    .set_write_timeout(Some(Duration::from_millis(200)))
                    .expect("timeout");
                let chunk = vec![0x5au8; 64 * 1024];
                while !stop_ref.load(Ordering::Relaxed) {
                    match stream.write(&chunk) {
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(e) => panic!("send from {source}: {e}"),
                    }
                }
            });
        }
        std::thread::sleep(warmup);
        let start = (
            received[&LS_IP].load(Ordering::Relaxed),
            received[&BE_IP].load(Ordering::Relaxed),
        );
        let began = Instant::now();
        std::thread::sleep(window);
        let end = (
            received[&LS_IP].load(Ordering::Relaxed),
            received[&BE_IP].load(Ordering::Relaxed),
        );
        let seconds = began.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        (
            (end.0 - start.0) as f64 * 8.0 / seconds,
            (end.1 - start.1) as f64 * 8.0 / seconds,
        )
    })
}

/// A TCP connection whose source address is `source` (std cannot bind
/// before connecting).
fn connect_from(source: Ipv4Addr, to: SocketAddrV4) -> TcpStream {
    use rustix::net::{AddressFamily as Af, SocketType, bind, connect, socket};
    let fd = socket(Af::INET, SocketType::STREAM, None).expect("socket");
    bind(&fd, &SocketAddr::V4(SocketAddrV4::new(source, 0))).expect("bind source");
    connect(&fd, &SocketAddr::V4(to)).expect("connect");
    TcpStream::from(fd)
}

fn mbit(bps: f64) -> String {
    format!("{:.1} Mbit/s", bps / 1e6)
}

#[test]
fn be_is_capped_and_ls_keeps_its_guarantee_on_a_real_veth() {
    if !rustix::process::geteuid().is_root() {
        println!("SKIP: network QoS real test needs root (network namespaces, CAP_NET_ADMIN)");
        return;
    }
    let (sender, receiver) = match (Netns::new(), Netns::new()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            println!("SKIP: cannot create a network namespace: {e}");
            return;
        }
    };
    let started = Instant::now();
    let ifindex = build_link(&sender, &receiver);
    let be_cap = TOTAL_BPS * f64::from(BE_LIMIT_PCT) / 100.0;
    let ls_guarantee = TOTAL_BPS * f64::from(LS_REQUEST_PCT) / 100.0;

    // Control: without the plan BE is far above its cap, so the shaped
    // assertions below can fail.
    let both = [LS_IP, BE_IP];
    let (ls_free, be_free) = measure(
        &sender,
        &receiver,
        &both,
        Duration::from_millis(300),
        Duration::from_secs(1),
    );
    println!("unshaped: LS {} BE {}", mbit(ls_free), mbit(be_free));
    assert!(
        be_free > 3.0 * be_cap,
        "unshaped BE only {}: veth too slow to tell",
        mbit(be_free)
    );

    let spec = node_slo(true);
    let NetQosDecision::Apply(plan) = decide(Some(&spec), &pods(true), None) else {
        panic!("expected a plan")
    };
    let observed = sender.run(|| {
        let mut socket = RouteSocket::open().expect("route socket");
        let first =
            run_round(&mut socket, ifindex, Some(&spec), &pods(true), None).expect("first round");
        assert!(first.errors.is_empty(), "{:?}", first.errors);
        assert_eq!(first.applied, 1 + 4 + 2);
        let second =
            run_round(&mut socket, ifindex, Some(&spec), &pods(true), None).expect("second round");
        assert_eq!(
            (second.applied, second.errors.len()),
            (0, 0),
            "second round changed something"
        );
        socket.observe(ifindex).expect("read back")
    });
    // Read back through netlink: the classes as planned, one filter per pod.
    assert!(observed.has_our_qdisc());
    assert_eq!(
        observed.root_qdisc.as_ref().and_then(|q| q.default_minor),
        Some(2)
    );
    for spec in &plan.classes {
        let want = wire_class(spec);
        let have = observed.classes.iter().find(|c| c.handle == want.handle);
        assert_eq!(have, Some(&want), "class 1:{}", spec.minor);
    }
    let filters: Vec<(Option<IpAddr>, Option<u32>)> = observed
        .filters
        .iter()
        .map(|f| (f.source, f.class))
        .collect();
    assert_eq!(filters.len(), 2, "{filters:?}");
    assert!(filters.contains(&(Some(IpAddr::V4(LS_IP)), Some(class_handle(NetQosClass::Ls)))));
    assert!(filters.contains(&(Some(IpAddr::V4(BE_IP)), Some(class_handle(NetQosClass::Be)))));

    // BE alone: it borrows up to its limit (ceil) and no further.
    let (_, be_alone) = measure(
        &sender,
        &receiver,
        &[BE_IP],
        Duration::from_millis(700),
        Duration::from_secs(2),
    );
    println!(
        "shaped, BE alone: BE {} (limit {})",
        mbit(be_alone),
        mbit(be_cap)
    );
    assert!(
        be_alone <= 1.1 * be_cap,
        "BE alone {} above its limit {}",
        mbit(be_alone),
        mbit(be_cap)
    );
    assert!(
        be_alone >= 0.8 * be_cap,
        "BE alone {} far below its limit {}",
        mbit(be_alone),
        mbit(be_cap)
    );
    // Both at once: LS (lower HTB prio number) borrows the spare bandwidth
    // first, so BE is held to its guarantee and LS gets at least its own.
    let (ls, be) = measure(
        &sender,
        &receiver,
        &both,
        Duration::from_millis(700),
        Duration::from_secs(2),
    );
    let be_guarantee = TOTAL_BPS * f64::from(BE_REQUEST_PCT) / 100.0;
    println!(
        "shaped, both: LS {} (guarantee {}) BE {} (guarantee {}, limit {})",
        mbit(ls),
        mbit(ls_guarantee),
        mbit(be),
        mbit(be_guarantee),
        mbit(be_cap)
    );
    assert!(
        be <= 1.1 * be_cap,
        "BE {} above its limit {}",
        mbit(be),
        mbit(be_cap)
    );
    assert!(
        be >= 0.8 * be_guarantee,
        "BE {} below its guarantee {}",
        mbit(be),
        mbit(be_guarantee)
    );
    assert!(
        ls >= 0.9 * ls_guarantee,
        "LS {} below its guarantee {}",
        mbit(ls),
        mbit(ls_guarantee)
    );
    assert!(
        ls + be <= 1.1 * TOTAL_BPS,
        "together {} above the total",
        mbit(ls + be)
    );

    // The LS pod asks for its own egress limit: it gets a class of its own
    // (rate = ceil = the limit) and alone, where its QoS class would let it
    // take the whole 100 Mbit/s, it is held near 10 Mbit/s.
    let annotation = format!(r#"{{"egressLimit": "{LS_POD_LIMIT}"}}"#);
    let limited = pods_with_ls_annotation(true, Some(&annotation));
    let NetQosDecision::Apply(limited_plan) = decide(Some(&spec), &limited, None) else {
        panic!("expected a plan")
    };
    let pod_class = limited_plan.pod_classes[0].clone();
    sender.run(|| {
        let mut socket = RouteSocket::open().expect("route socket");
        let round = run_round(&mut socket, ifindex, Some(&spec), &limited, None).expect("round");
        assert!(round.errors.is_empty(), "{:?}", round.errors);
        // The class added, the LS filter replaced.
        assert_eq!(round.applied, 3);
        let again = run_round(&mut socket, ifindex, Some(&spec), &limited, None).expect("round");
        assert_eq!((again.applied, again.errors.len()), (0, 0));
        let after = socket.observe(ifindex).expect("read back");
        let want = wire_class(limited_plan.class(pod_class.minor).expect("pod class"));
        assert_eq!(
            after.classes.iter().find(|c| c.handle == want.handle),
            Some(&want)
        );
        let ls_filter = after
            .filters
            .iter()
            .find(|f| f.source == Some(IpAddr::V4(LS_IP)))
            .expect("LS filter");
        assert_eq!(ls_filter.class, Some(handle(MAJOR, pod_class.minor)));
    });
    let (ls_alone, _) = measure(
        &sender,
        &receiver,
        &[LS_IP],
        Duration::from_millis(700),
        Duration::from_secs(2),
    );
    println!(
        "shaped, LS pod with its own limit: {} (limit {})",
        mbit(ls_alone),
        mbit(LS_POD_LIMIT_BPS)
    );
    assert!(
        ls_alone <= 1.1 * LS_POD_LIMIT_BPS,
        "LS pod {} above its own limit {}",
        mbit(ls_alone),
        mbit(LS_POD_LIMIT_BPS)
    );
    assert!(
        ls_alone >= 0.8 * LS_POD_LIMIT_BPS,
        "LS pod {} far below its own limit {}",
        mbit(ls_alone),
        mbit(LS_POD_LIMIT_BPS)
    );
    // The annotation goes: back to the LS class, the pod class deleted.
    sender.run(|| {
        let mut socket = RouteSocket::open().expect("route socket");
        let round = run_round(&mut socket, ifindex, Some(&spec), &pods(true), None).expect("round");
        assert!(round.errors.is_empty(), "{:?}", round.errors);
        assert_eq!(round.applied, 3);
        let after = socket.observe(ifindex).expect("read back");
        assert!(
            !after
                .classes
                .iter()
                .any(|c| c.handle == handle(MAJOR, pod_class.minor)),
            "pod class left behind"
        );
        let ls_filter = after
            .filters
            .iter()
            .find(|f| f.source == Some(IpAddr::V4(LS_IP)))
            .expect("LS filter");
        assert_eq!(ls_filter.class, Some(class_handle(NetQosClass::Ls)));
    });

    // The BE pod goes: its filter is removed, LS's stays; then disabling
    // removes the whole tree.
    sender.run(|| {
        let mut socket = RouteSocket::open().expect("route socket");
        let round =
            run_round(&mut socket, ifindex, Some(&spec), &pods(false), None).expect("round");
        assert_eq!((round.applied, round.errors.len()), (1, 0));
        let after = socket.observe(ifindex).expect("read back");
        let sources: Vec<Option<IpAddr>> = after.filters.iter().map(|f| f.source).collect();
        assert_eq!(sources, vec![Some(IpAddr::V4(LS_IP))]);
        assert!(
            after
                .classes
                .iter()
                .any(|c| c.handle == (1 << 16 | u32::from(BE_CLASS_MINOR)))
        );
        let off = run_round(
            &mut socket,
            ifindex,
            Some(&node_slo(false)),
            &pods(false),
            None,
        )
        .expect("round");
        assert_eq!((off.applied, off.errors.len()), (1, 0));
        let gone = socket.observe(ifindex).expect("read back");
        assert!(!gone.has_our_qdisc(), "{:?}", gone.root_qdisc);
        assert!(gone.classes.is_empty() && gone.filters.is_empty());
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}
