//! A fault-injecting HTTP proxy for the S3 and HTTP servers: one connection per request (it asks
//! the server to close after each), and for each request a [`Fault`] chosen by the test's plan:
//! pass it on, answer 500 or 503 itself, reset the connection or cut the body part-way, or stall
//! the response. The plan sees each request's line and headers, and may change the served object
//! before the request goes on (an object replaced mid-download).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Passes it to the server and the answer back.
    Pass,
    /// Answers with this status (500, 503) and a short body, without asking the server.
    Status(u16),
    /// Passes the answer's head and this many bytes of its body, then resets the connection.
    Reset(usize),
    /// Passes the head and this many body bytes, then closes (a body cut short).
    Truncate(usize),
    /// Passes the head and this many body bytes, then sends nothing for this long.
    Stall(usize, Duration),
    /// Holds the request this long before passing it on (a slow server).
    Hold(Duration),
}

/// A request as the plan sees it.
#[derive(Debug, Clone)]
pub struct Request {
    /// Its number (from 0) among the requests this proxy saw.
    pub index: usize,
    /// `GET /bucket/key HTTP/1.1`.
    pub line: String,
    /// Its headers, names in lower case.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The method.
    pub fn method(&self) -> &str {
        self.line.split(' ').next().unwrap_or("")
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Whether it asks for a byte range.
    pub fn ranged(&self) -> bool {
        self.header("range").is_some()
    }
}

type Plan = dyn FnMut(&Request) -> Fault + Send;

/// The proxy, listening on 127.0.0.1 until dropped.
pub struct FaultProxy {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicUsize>,
    faults: Arc<Mutex<Vec<(usize, Fault)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy in front of `upstream` (`http://127.0.0.1:PORT`), doing what `plan` says.
    pub fn start(upstream: &str, plan: impl FnMut(&Request) -> Fault + Send + 'static) -> FaultProxy {
        let up = upstream.trim_start_matches("http://").trim_end_matches('/').to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("a loopback port: {e}"));
        listener.set_nonblocking(true).unwrap_or_else(|e| panic!("a nonblocking listener: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("its address: {e}"));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicUsize::new(0));
        let faults = Arc::new(Mutex::new(Vec::new()));
        let plan: Arc<Mutex<Box<Plan>>> = Arc::new(Mutex::new(Box::new(plan)));
        let (s, n, f) = (stop.clone(), seen.clone(), faults.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (plan, up, n, f) = (plan.clone(), up.clone(), n.clone(), f.clone());
                        std::thread::spawn(move || {
                            let _ = serve(client, &up, &plan, &n, &f);
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => break,
                }
            }
        });
        FaultProxy { addr, stop, seen, faults, thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests seen so far.
    pub fn requests(&self) -> usize {
        self.seen.load(Ordering::Relaxed)
    }

    /// The faults done so far (request number, fault), passes left out.
    pub fn faults(&self) -> Vec<(usize, Fault)> {
        self.faults.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(client: TcpStream, up: &str, plan: &Mutex<Box<Plan>>, seen: &AtomicUsize, faults: &Mutex<Vec<(usize, Fault)>>) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    // One request per connection: the proxy asks the server to close after it, and says so.
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(());
    }
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let index = seen.fetch_add(1, Ordering::Relaxed);
    let req = Request { index, line: line.trim_end().to_string(), headers };
    let fault = match plan.lock() {
        Ok(mut p) => p(&req),
        Err(_) => Fault::Pass,
    };
    if fault != Fault::Pass {
        if let Ok(mut f) = faults.lock() {
            f.push((index, fault));
        }
    }
    if let Fault::Status(code) = fault {
        let text = format!("injected {code}");
        write!(client, "HTTP/1.1 {code} Injected\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}", text.len())?;
        return Ok(());
    }
    if let Fault::Hold(t) = fault {
        std::thread::sleep(t);
    }
    let mut server = TcpStream::connect(up)?;
    write!(server, "{}\r\n", req.line)?;
    for (k, v) in &req.headers {
        if k != "connection" {
            write!(server, "{k}: {v}\r\n")?;
        }
    }
    write!(server, "connection: close\r\n\r\n")?;
    server.write_all(&body)?;
    // The answer's head goes through whole; the fault applies to its body.
    let mut from = BufReader::new(server);
    let mut head = Vec::new();
    loop {
        let mut h = Vec::new();
        if from.read_until(b'\n', &mut h)? == 0 {
            break;
        }
        head.extend_from_slice(&h);
        if h == b"\r\n" || h == b"\n" {
            break;
        }
    }
    client.write_all(&head)?;
    let limit = match fault {
        Fault::Reset(n) | Fault::Truncate(n) | Fault::Stall(n, _) => n,
        _ => usize::MAX,
    };
    let mut sent = 0usize;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let take = n.min(limit - sent);
        client.write_all(&buf[..take])?;
        sent += take;
        if sent == limit {
            break;
        }
    }
    client.flush()?;
    match fault {
        Fault::Reset(_) => {
            // SO_LINGER 0: close sends RST, not FIN.
            rustix::net::sockopt::set_socket_linger(&client, Some(Duration::ZERO))?;
            drop(client);
        }
        Fault::Truncate(_) => client.shutdown(Shutdown::Both)?,
        Fault::Stall(_, t) => {
            std::thread::sleep(t);
            client.shutdown(Shutdown::Both)?;
        }
        _ => {}
    }
    Ok(())
}
