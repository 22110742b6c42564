//! Helpers for tests of the binaries (enabled by the `testing` feature): plain
//! HTTP/1.1 requests, a fake API server answering `GET /version` (plus canned,
//! delayed or computed routes and watch streams, recording every request with
//! its body), kubeconfig files in throwaway directories, a child-process
//! wrapper that collects output lines, and the checks every binary's CLI
//! test repeats (version flag,
//! unreachable cluster, probes, SIGTERM). Test code only; failures surface
//! as `io::Error`, `None` or an `Err(String)` carrying the process output.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A parsed HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

fn request_bytes(addr: SocketAddr, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

/// Parses a complete HTTP/1.1 response (content-length, chunked or read-to-close body).
pub fn parse_response(raw: &[u8]) -> io::Result<HttpResponse> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| invalid("no header end"))?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| invalid("non-UTF-8 header"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| invalid("empty response"))?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[head_end + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body_bytes = if chunked {
        decode_chunked(rest).ok_or_else(|| invalid("bad chunked body"))?
    } else {
        rest.to_vec()
    };
    let body = String::from_utf8(body_bytes).map_err(|_| invalid("non-UTF-8 body"))?;
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn decode_chunked(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

/// `GET path` over a fresh tokio connection (readiness-based I/O, so no extra tokio features).
pub async fn http_get(addr: SocketAddr, path: &str) -> io::Result<HttpResponse> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let request = request_bytes(addr, path);
    let mut written = 0;
    while written < request.len() {
        stream.writable().await?;
        match stream.try_write(&request[written..]) {
            Ok(n) => written += n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    let mut raw = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        stream.readable().await?;
        match stream.try_read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    parse_response(&raw)
}

/// `GET path` over a fresh blocking connection, bounded by `timeout`.
pub fn http_get_blocking(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(&request_bytes(addr, path))?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// A loopback address nothing listens on (bound, then released).
pub fn closed_local_addr() -> io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.local_addr()
}

/// A plain-HTTP stand-in for kube-apiserver that answers `GET /version`,
/// whatever routes a test adds, and 404 to the rest. Each connection is
/// served on its own thread.
pub struct FakeApiServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<String>>>,
    state: Arc<FakeApiState>,
    thread: Option<thread::JoinHandle<()>>,
}

/// One request the fake API server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    /// Path and query, e.g. `/api/v1/nodes/n1?fieldManager=x`.
    pub target: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RecordedRequest {
    /// The path without the query string.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// Computes the answer to a request, or `None` to leave it to earlier routes.
type RouteHandler = dyn Fn(&RecordedRequest) -> Option<(u16, String)> + Send + Sync;

enum Route {
    Canned {
        method: String,
        path: String,
        status: u16,
        body: String,
        /// How long the answer is held back.
        delay: Duration,
    },
    Handler(Box<RouteHandler>),
}

impl Route {
    /// The status, body and delay of this route's answer to `request`.
    fn answer(&self, request: &RecordedRequest) -> Option<(u16, String, Duration)> {
        match self {
            Route::Canned {
                method,
                path,
                status,
                body,
                delay,
            } => (*method == request.method && path == request.path())
                .then(|| (*status, body.clone(), *delay)),
            Route::Handler(handler) => {
                handler(request).map(|(status, body)| (status, body, Duration::ZERO))
            }
        }
    }
}

/// Events served to `?watch=true` requests for one path.
struct WatchRoute {
    path: String,
    /// One JSON watch event per entry, in order.
    events: Vec<String>,
}

#[derive(Default)]
struct FakeApiState {
    recorded: Mutex<Vec<RecordedRequest>>,
    routes: Mutex<Vec<Arc<Route>>>,
    watches: Mutex<Vec<WatchRoute>>,
    /// Watches of paths without a watch route are held open too.
    hold_all_watches: AtomicBool,
    /// Set on drop so open watch streams end.
    closed: AtomicBool,
}

impl FakeApiState {
    /// Events of the watch route for `path` from `from` on; `None` when
    /// `path` has no watch route and not all watches are held open.
    fn watch_events(&self, path: &str, from: usize) -> Option<Vec<String>> {
        let watches = self.watches.lock().ok()?;
        match watches.iter().find(|route| route.path == path) {
            Some(route) => Some(route.events.get(from..).unwrap_or_default().to_vec()),
            None => self.hold_all_watches.load(Ordering::Relaxed).then(Vec::new),
        }
    }

    /// The answer of the latest route that answers `request`.
    fn answer(&self, request: &RecordedRequest) -> Option<(u16, String, Duration)> {
        // Cloned out so that handlers run without the lock.
        let routes = self.routes.lock().ok()?.clone();
        routes.iter().rev().find_map(|route| route.answer(request))
    }

    fn add_route(&self, route: Route) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.push(Arc::new(route));
        }
    }

    /// Sleeps for `delay`, cut short when the server is dropped; false then.
    fn sleep_unless_closed(&self, delay: Duration) -> bool {
        let deadline = Instant::now() + delay;
        while Instant::now() < deadline {
            if self.closed.load(Ordering::Relaxed) {
                return false;
            }
            thread::sleep(Duration::from_millis(20).min(deadline - Instant::now()));
        }
        true
    }
}

/// The body a real API server returns for `GET /version`.
pub const FAKE_VERSION_BODY: &str = r#"{"major":"1","minor":"35","gitVersion":"v1.35.0-fake","gitCommit":"0000000","gitTreeState":"clean","buildDate":"2026-01-01T00:00:00Z","goVersion":"go1.25","compiler":"gc","platform":"linux/amd64"}"#;

impl FakeApiServer {
    pub fn start() -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(FakeApiState::default());
        let thread = thread::spawn({
            let stop = Arc::clone(&stop);
            let requests = Arc::clone(&requests);
            let state = Arc::clone(&state);
            move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let requests = Arc::clone(&requests);
                            let state = Arc::clone(&state);
                            thread::spawn(move || {
                                serve_fake_api_connection(stream, &requests, &state)
                            });
                        }
                        Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                            thread::sleep(Duration::from_millis(10));
                        }
                        Err(_) => break,
                    }
                }
            }
        });
        Ok(Self {
            addr,
            stop,
            requests,
            state,
            thread: Some(thread),
        })
    }

    /// Answers `method path` (query ignored) with `status` and a JSON `body`
    /// from now on; later routes for the same request win.
    pub fn respond(&self, method: &str, path: &str, status: u16, body: &str) {
        self.respond_delayed(method, path, status, body, Duration::ZERO);
    }

    /// [`FakeApiServer::respond`], holding each answer back for `delay`
    /// (a slow server, or with a long delay one that never answers). Other
    /// connections are served meanwhile.
    pub fn respond_delayed(
        &self,
        method: &str,
        path: &str,
        status: u16,
        body: &str,
        delay: Duration,
    ) {
        self.state.add_route(Route::Canned {
            method: method.to_string(),
            path: path.to_string(),
            status,
            body: body.to_string(),
            delay,
        });
    }

    /// Lets `handler` answer requests from now on, for servers whose answers
    /// depend on the request or on earlier ones (an object store, say).
    /// `None` leaves a request to the routes added before; later routes win
    /// over the handler as they do over canned ones. Watch streams are not
    /// offered to it.
    pub fn respond_with(
        &self,
        handler: impl Fn(&RecordedRequest) -> Option<(u16, String)> + Send + Sync + 'static,
    ) {
        self.state.add_route(Route::Handler(Box::new(handler)));
    }

    /// Holds every watch request open from now on, also for paths without
    /// a watch route (those stream nothing until events are pushed), as
    /// informers expect of an API server whose objects do not change.
    pub fn hold_watches_open(&self) {
        self.state.hold_all_watches.store(true, Ordering::Relaxed);
    }

    /// Serves `GET path?watch=true` (also `watch=1`) as an open watch
    /// stream from now on: every event pushed with
    /// [`FakeApiServer::push_watch_event`], in order, then it stays open
    /// until the server is dropped. Without this, watch requests get the
    /// canned route of the path like any other request.
    pub fn respond_watch(&self, path: &str) {
        if let Ok(mut watches) = self.state.watches.lock()
            && !watches.iter().any(|route| route.path == path)
        {
            watches.push(WatchRoute {
                path: path.to_string(),
                events: Vec::new(),
            });
        }
    }

    /// Appends `{"type": event_type, "object": object}` to the watch stream
    /// of `path` (registering it as with [`FakeApiServer::respond_watch`]).
    /// Open streams deliver it at once; every new watch request replays all
    /// events from the first.
    pub fn push_watch_event(&self, path: &str, event_type: &str, object: &str) {
        self.respond_watch(path);
        let event = format!(r#"{{"type":"{event_type}","object":{object}}}"#);
        if let Ok(mut watches) = self.state.watches.lock()
            && let Some(route) = watches.iter_mut().find(|route| route.path == path)
        {
            route.events.push(event);
        }
    }

    /// Every request so far with its headers and body.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.state
            .recorded
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Waits until a request matching `method` and `path` (query ignored)
    /// has arrived and returns the first one.
    pub fn wait_for_request(
        &self,
        method: &str,
        path: &str,
        timeout: Duration,
    ) -> Option<RecordedRequest> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self
                .recorded()
                .into_iter()
                .find(|request| request.method == method && request.path() == path);
            if found.is_some() || Instant::now() >= deadline {
                return found;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Request lines seen so far, e.g. `GET /version HTTP/1.1`.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.state.closed.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    }
}

fn serve_fake_api_connection(
    stream: TcpStream,
    requests: &Mutex<Vec<String>>,
    state: &FakeApiState,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(reader_stream) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader_stream);
    let mut writer = stream;
    // Serve keep-alive requests until the client closes.
    loop {
        let mut request_line = String::new();
        match reader.read_line(&mut request_line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut content_length = 0usize;
        let mut close_after = false;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let (name, value) = (name.trim(), value.trim());
                headers.push((name.to_ascii_lowercase(), value.to_string()));
                if name.eq_ignore_ascii_case("content-length") {
                    content_length = value.parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("connection")
                    && value.eq_ignore_ascii_case("close")
                {
                    close_after = true;
                }
            }
        }
        let mut body = vec![0u8; content_length];
        if content_length > 0 && reader.read_exact(&mut body).is_err() {
            return;
        }
        let request_line = request_line.trim().to_string();
        if let Ok(mut seen) = requests.lock() {
            seen.push(request_line.clone());
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let request = RecordedRequest {
            method,
            target,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        if let Ok(mut recorded) = state.recorded.lock() {
            recorded.push(request.clone());
        }
        let (method, target, path) = (&request.method, &request.target, request.path());
        let is_watch = method == "GET"
            && target.split_once('?').is_some_and(|(_, query)| {
                query
                    .split('&')
                    .any(|p| p == "watch=true" || p == "watch=1")
            });
        if is_watch && state.watch_events(path, 0).is_some() {
            serve_watch_stream(&mut writer, path, state);
            return;
        }
        let (status, body) = match state.answer(&request) {
            Some((code, body, delay)) => {
                if !state.sleep_unless_closed(delay) {
                    return;
                }
                (format!("{code} {}", reason_phrase(code)), body)
            }
            None if path == "/version" => ("200 OK".to_string(), FAKE_VERSION_BODY.to_string()),
            None => (
                "404 Not Found".to_string(),
                r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#.to_string(),
            ),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if writer.write_all(response.as_bytes()).is_err() || close_after {
            return;
        }
    }
}

/// Streams the watch events of `path` as chunks, one JSON event per line,
/// until the client goes away or the server is dropped.
fn serve_watch_stream(writer: &mut TcpStream, path: &str, state: &FakeApiState) {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    if writer.write_all(head.as_bytes()).is_err() {
        return;
    }
    let mut sent = 0;
    while !state.closed.load(Ordering::Relaxed) {
        let Some(events) = state.watch_events(path, sent) else {
            return;
        };
        for event in &events {
            let line = format!("{event}\n");
            let chunk = format!("{:x}\r\n{line}\r\n", line.len());
            if writer.write_all(chunk.as_bytes()).is_err() || writer.flush().is_err() {
                return;
            }
        }
        sent += events.len();
        thread::sleep(Duration::from_millis(20));
    }
    let _ = writer.write_all(b"0\r\n\r\n");
}

/// A directory removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> io::Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let unique = format!(
            "koord-test-{label}-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(&path)?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Writes a one-cluster kubeconfig pointing at `server` and returns its path.
pub fn write_kubeconfig(dir: &Path, server: &str) -> io::Result<PathBuf> {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n\
         contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
         current-context: test\nusers:\n- name: test\n  user:\n    token: test-token\n"
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

#[derive(Default)]
struct Output {
    lines: Vec<String>,
    closed_streams: u8,
}

/// A spawned binary whose stdout and stderr lines are collected; killed on drop.
pub struct TestProcess {
    child: Child,
    output: Arc<(Mutex<Output>, Condvar)>,
    status: Option<ExitStatus>,
}

impl TestProcess {
    /// Spawns `command` with piped output (stdin closed).
    pub fn spawn(mut command: Command) -> io::Result<Self> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn()?;
        let output = Arc::new((Mutex::new(Output::default()), Condvar::new()));
        if let Some(stdout) = child.stdout.take() {
            collect_lines(stdout, Arc::clone(&output));
        }
        if let Some(stderr) = child.stderr.take() {
            collect_lines(stderr, Arc::clone(&output));
        }
        Ok(Self {
            child,
            output,
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything printed so far, one line per entry.
    pub fn output(&self) -> String {
        let (lock, _) = &*self.output;
        lock.lock().map(|o| o.lines.join("\n")).unwrap_or_default()
    }

    /// Waits for a line containing `needle`; returns that line.
    pub fn wait_for_line(&self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (lock, changed) = &*self.output;
        let mut output = lock.lock().ok()?;
        loop {
            if let Some(line) = output.lines.iter().find(|line| line.contains(needle)) {
                return Some(line.clone());
            }
            let now = Instant::now();
            if now >= deadline || output.closed_streams >= 2 {
                return None;
            }
            output = changed.wait_timeout(output, deadline - now).ok()?.0;
        }
    }

    /// Waits for a `serving <what> on <addr>` line and parses the address.
    pub fn wait_for_serving_addr(&self, what: &str, timeout: Duration) -> Option<SocketAddr> {
        let marker = format!("serving {what} on ");
        let line = self.wait_for_line(&marker, timeout)?;
        let rest = &line[line.find(&marker)? + marker.len()..];
        let addr = rest
            .split(|c: char| c.is_whitespace() || c == '"' || c == ',')
            .next()?;
        addr.parse().ok()
    }

    /// Sends a signal by name (e.g. `TERM`) with the system `kill` command.
    pub fn signal(&self, name: &str) -> io::Result<()> {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "kill -{name} {} failed: {status}",
                self.pid()
            )))
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                self.status = Some(status);
                // Let the reader threads drain what the process printed last.
                let _ = self.wait_for_line("\u{0}never\u{0}", Duration::from_secs(2));
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestProcess {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn collect_lines(stream: impl Read + Send + 'static, output: Arc<(Mutex<Output>, Condvar)>) {
    thread::spawn(move || {
        let reader = BufReader::new(stream);
        for line in reader.lines() {
            let Ok(line) = line else { break };
            let (lock, changed) = &*output;
            if let Ok(mut output) = lock.lock() {
                output.lines.push(line);
            }
            changed.notify_all();
        }
        let (lock, changed) = &*output;
        if let Ok(mut output) = lock.lock() {
            output.closed_streams += 1;
        }
        changed.notify_all();
    });
}

/// Waits the binaries' tests use: generous, since the machine may be busy.
pub const PROCESS_WAIT: Duration = Duration::from_secs(20);
pub const HTTP_WAIT: Duration = Duration::from_secs(5);

/// `bin` without the settings a test must not inherit: `KUBECONFIG`,
/// `KUBERNETES_SERVICE_HOST`, `NODE_NAME` and `RUST_LOG` are removed.
pub fn isolated_command(bin: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(bin);
    command
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("NODE_NAME")
        .env_remove("RUST_LOG");
    command
}

/// [`isolated_command`] pointed at `kubeconfig`.
pub fn command_with_kubeconfig(bin: impl AsRef<std::ffi::OsStr>, kubeconfig: &Path) -> Command {
    let mut command = isolated_command(bin);
    command.env("KUBECONFIG", kubeconfig);
    command
}

/// Runs `bin --version`: it must exit 0 and print `<name> ` followed by a
/// line containing `version`. Returns what it printed.
pub fn check_version_flag(bin: &str, name: &str, version: &str) -> Result<String, String> {
    let output = isolated_command(bin)
        .arg("--version")
        .output()
        .map_err(|err| format!("cannot run {bin}: {err}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "{bin} --version failed ({}): {stdout}",
            output.status
        ));
    }
    if !stdout.starts_with(&format!("{name} ")) || !stdout.contains(version) {
        return Err(format!("expected \"{name} {version}...\", got: {stdout}"));
    }
    Ok(stdout)
}

/// A kubeconfig in `dir` whose server is a loopback port nothing listens on.
pub fn unreachable_kubeconfig(dir: &Path) -> io::Result<(PathBuf, SocketAddr)> {
    let closed = closed_local_addr()?;
    let path = write_kubeconfig(dir, &format!("http://{closed}"))?;
    Ok((path, closed))
}

/// Spawns `command` and expects it to exit non-zero on its own within
/// `timeout`, having printed every one of `needles`. Returns its output.
pub fn expect_failed_exit(
    command: Command,
    timeout: Duration,
    needles: &[&str],
) -> Result<String, String> {
    let mut process = TestProcess::spawn(command).map_err(|err| format!("cannot spawn: {err}"))?;
    let status = process
        .wait_exit(timeout)
        .map_err(|err| format!("cannot wait: {err}"))?;
    let output = process.output();
    match status {
        None => Err(format!("still running after {timeout:?}:\n{output}")),
        Some(status) if status.success() => Err(format!("exited 0, expected a failure:\n{output}")),
        Some(_) => match needles.iter().find(|needle| !output.contains(**needle)) {
            Some(missing) => Err(format!("{missing:?} not in the output:\n{output}")),
            None => Ok(output),
        },
    }
}

/// Polls `GET path` until it answers `status`; returns that response.
pub fn wait_for_http_status(
    addr: SocketAddr,
    path: &str,
    status: u16,
    timeout: Duration,
) -> Result<HttpResponse, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match http_get_blocking(addr, path, HTTP_WAIT) {
            Ok(response) if response.status == status => return Ok(response),
            Ok(response) => format!("{} {}", response.status, response.body),
            Err(err) => err.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!("GET {path} never answered {status}; last: {last}"));
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// `GET /healthz` answers 200 `ok`.
pub fn check_healthz(addr: SocketAddr) -> Result<(), String> {
    let response =
        http_get_blocking(addr, "/healthz", HTTP_WAIT).map_err(|err| format!("/healthz: {err}"))?;
    if (response.status, response.body.as_str()) == (200, "ok") {
        Ok(())
    } else {
        Err(format!(
            "/healthz answered {} {}",
            response.status, response.body
        ))
    }
}

impl TestProcess {
    /// [`TestProcess::wait_for_serving_addr`], failing with the output so far.
    pub fn serving_addr(&self, what: &str, timeout: Duration) -> Result<SocketAddr, String> {
        self.wait_for_serving_addr(what, timeout)
            .ok_or_else(|| format!("no \"serving {what}\" line:\n{}", self.output()))
    }

    /// [`TestProcess::wait_for_line`], failing with the output so far.
    pub fn expect_line(&self, needle: &str, timeout: Duration) -> Result<String, String> {
        self.wait_for_line(needle, timeout)
            .ok_or_else(|| format!("no line with {needle:?}:\n{}", self.output()))
    }

    /// Sends `signal` (e.g. `TERM`) and expects exit code 0 within
    /// `timeout`. Returns the whole output.
    pub fn stop_cleanly(&mut self, signal: &str, timeout: Duration) -> Result<String, String> {
        self.signal(signal)
            .map_err(|err| format!("cannot signal: {err}"))?;
        let status = self
            .wait_exit(timeout)
            .map_err(|err| format!("cannot wait: {err}"))?;
        let output = self.output();
        match status {
            Some(status) if status.code() == Some(0) => Ok(output),
            Some(status) => Err(format!("SIG{signal} led to {status}:\n{output}")),
            None => Err(format!(
                "still running {timeout:?} after SIG{signal}:\n{output}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_length_and_chunked_responses() {
        let plain =
            parse_response(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\n\r\nno")
                .unwrap();
        assert_eq!((plain.status, plain.body.as_str()), (503, "no"));
        let chunked =
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                .unwrap();
        assert_eq!(chunked.body, "abcde");
        assert_eq!(chunked.header("transfer-encoding"), Some("chunked"));
        assert!(parse_response(b"garbage").is_err());
    }

    #[test]
    fn fake_api_server_answers_version() {
        let server = FakeApiServer::start().unwrap();
        let response =
            http_get_blocking(server.addr(), "/version", Duration::from_secs(5)).unwrap();
        assert_eq!(response.status, 200);
        assert!(response.body.contains("\"gitVersion\":\"v1.35.0-fake\""));
        let missing = http_get_blocking(server.addr(), "/api", Duration::from_secs(5)).unwrap();
        assert_eq!(missing.status, 404);
        assert_eq!(
            server.requests(),
            ["GET /version HTTP/1.1", "GET /api HTTP/1.1"]
        );
    }

    #[test]
    fn fake_api_server_records_bodies_and_serves_canned_routes() {
        let server = FakeApiServer::start().unwrap();
        server.respond("PATCH", "/api/v1/nodes/n1", 200, r#"{"kind":"Node"}"#);
        let body = r#"{"metadata":{}}"#;
        let response = send(
            server.addr(),
            "PATCH /api/v1/nodes/n1?fieldManager=t",
            "Content-Type: application/merge-patch+json\r\n",
            body,
        );
        assert_eq!(
            (response.status, response.body.as_str()),
            (200, r#"{"kind":"Node"}"#)
        );
        let request = server
            .wait_for_request("PATCH", "/api/v1/nodes/n1", Duration::from_secs(5))
            .unwrap();
        assert_eq!(request.body, body);
        assert_eq!(
            request.header("content-type"),
            Some("application/merge-patch+json")
        );
        assert_eq!(request.target, "/api/v1/nodes/n1?fieldManager=t");
        // Unrouted paths still 404.
        let missing =
            http_get_blocking(server.addr(), "/api/v1/nodes/n2", Duration::from_secs(5)).unwrap();
        assert_eq!(missing.status, 404);
    }

    /// Sends `request` (`METHOD target`) with the CRLF-ended `headers` and
    /// `body` on a fresh connection.
    fn send(addr: SocketAddr, request: &str, headers: &str, body: &str) -> HttpResponse {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "{request} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        parse_response(&raw).unwrap()
    }

    /// Reads from `stream` until the text read so far contains `needle`.
    fn read_until(stream: &mut TcpStream, seen: &mut String, needle: &str) {
        let mut buffer = [0u8; 4096];
        while !seen.contains(needle) {
            let n = stream.read(&mut buffer).unwrap();
            assert!(n > 0, "stream closed before {needle:?}; got {seen:?}");
            seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    }

    /// Sends `GET target`, expects a 200 head and returns the open stream
    /// (reads bounded by `timeout`) with what was read so far.
    fn open_watch(server: &FakeApiServer, target: &str, timeout: Duration) -> (TcpStream, String) {
        let mut stream = TcpStream::connect(server.addr()).unwrap();
        stream.set_read_timeout(Some(timeout)).unwrap();
        write!(stream, "GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut seen = String::new();
        read_until(&mut stream, &mut seen, "\r\n\r\n");
        assert!(seen.starts_with("HTTP/1.1 200 OK\r\n"), "{seen}");
        (stream, seen)
    }

    #[test]
    fn fake_api_server_streams_watch_events_and_keeps_lists_apart() {
        let server = FakeApiServer::start().unwrap();
        server.respond(
            "GET",
            "/api/v1/nodes",
            200,
            r#"{"kind":"NodeList","items":[]}"#,
        );
        server.push_watch_event("/api/v1/nodes", "ADDED", r#"{"metadata":{"name":"n1"}}"#);
        // The list is still the canned route.
        let list = http_get_blocking(
            server.addr(),
            "/api/v1/nodes?limit=500",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(list.body, r#"{"kind":"NodeList","items":[]}"#);
        let (mut stream, mut seen) = open_watch(
            &server,
            "/api/v1/nodes?resourceVersion=1&watch=true",
            Duration::from_secs(10),
        );
        assert!(seen.contains("Transfer-Encoding: chunked"), "{seen}");
        read_until(&mut stream, &mut seen, "\"n1\"");
        assert!(
            seen.contains(r#"{"type":"ADDED","object":{"metadata":{"name":"n1"}}}"#),
            "{seen}"
        );
        // Later events reach the open stream.
        server.push_watch_event("/api/v1/nodes", "DELETED", r#"{"metadata":{"name":"n1"}}"#);
        read_until(&mut stream, &mut seen, "DELETED");
        // A path without a watch route answers watches like any request.
        let other = http_get_blocking(
            server.addr(),
            "/api/v1/pods?watch=true",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(other.status, 404);
    }

    #[test]
    fn fake_api_server_handler_computes_answers_and_yields_to_later_routes() {
        let server = FakeApiServer::start().unwrap();
        server.respond("GET", "/api/v1/pods", 200, r#"{"kind":"PodList"}"#);
        let created = Arc::new(AtomicU64::new(0));
        server.respond_with({
            let created = Arc::clone(&created);
            move |request| {
                (request.method == "POST").then(|| {
                    let count = created.fetch_add(1, Ordering::Relaxed) + 1;
                    (
                        201,
                        format!(r#"{{"count":{count},"echo":{}}}"#, request.body),
                    )
                })
            }
        });
        let first = send(
            server.addr(),
            "POST /api/v1/pods?dryRun=All",
            "",
            "{\"a\":1}",
        );
        assert_eq!(
            (first.status, first.body.as_str()),
            (201, r#"{"count":1,"echo":{"a":1}}"#)
        );
        let second = send(server.addr(), "POST /api/v1/events", "", "{}");
        assert_eq!(second.body, r#"{"count":2,"echo":{}}"#);
        // What the handler declines goes to the routes added before it.
        let list = send(server.addr(), "GET /api/v1/pods", "", "");
        assert_eq!(
            (list.status, list.body.as_str()),
            (200, r#"{"kind":"PodList"}"#)
        );
        assert_eq!(send(server.addr(), "GET /api/v1/nodes", "", "").status, 404);
        // A route added after the handler wins over it.
        server.respond("POST", "/api/v1/events", 429, "{}");
        assert_eq!(
            send(server.addr(), "POST /api/v1/events", "", "{}").status,
            429
        );
        assert_eq!(created.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn fake_api_server_delays_only_the_delayed_route() {
        let server = FakeApiServer::start().unwrap();
        let delay = Duration::from_millis(1500);
        server.respond_delayed("POST", "/slow", 201, "{}", delay);
        let slow = thread::spawn({
            let addr = server.addr();
            move || {
                let started = Instant::now();
                let response = send(addr, "POST /slow", "", "");
                (response.status, started.elapsed())
            }
        });
        server
            .wait_for_request("POST", "/slow", Duration::from_secs(5))
            .unwrap();
        // Another connection is answered while the slow one waits.
        assert_eq!(send(server.addr(), "GET /version", "", "").status, 200);
        assert!(!slow.is_finished(), "the slow answer came first");
        let (status, took) = slow.join().unwrap();
        assert_eq!(status, 201);
        assert!(took >= delay, "{took:?}");
    }

    #[test]
    fn fake_api_server_holds_unrouted_watches_open_when_asked() {
        let server = FakeApiServer::start().unwrap();
        server.hold_watches_open();
        let (mut stream, mut seen) = open_watch(
            &server,
            "/api/v1/pods?watch=true",
            Duration::from_millis(300),
        );
        // Open and silent: the read times out instead of seeing an end.
        let err = stream.read(&mut [0u8; 64]).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{err}"
        );
        // Events pushed later still reach the open stream.
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        server.push_watch_event("/api/v1/pods", "ADDED", r#"{"metadata":{"name":"p"}}"#);
        read_until(&mut stream, &mut seen, "ADDED");
        // Requests that are not watches are answered at once (no route: 404).
        assert_eq!(send(server.addr(), "GET /api/v1/pods", "", "").status, 404);
    }
}

/// Deterministic pseudo-random numbers for generated test cases and
/// benchmark workloads (a 64-bit LCG; the high bits are used): the same seed
/// gives the same sequence on every machine.
#[derive(Clone, Debug)]
pub struct Lcg(pub u64);

impl Lcg {
    /// A number in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound.max(1)
    }

    /// True one time in `one_in`.
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// A size knob of a benchmark from the environment, `default` when unset or
/// not a number.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
